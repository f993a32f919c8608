// Starts Swagger UI on the service's own OpenAPI document. Everything this page loads comes
// from the mordant binary; the online validator (validator.swagger.io) is switched off.
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "../openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    displayRequestDuration: true,
    defaultModelsExpandDepth: 0,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
