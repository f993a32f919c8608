//! The HTTP server: one thread per core, each with a single-threaded runtime of its own that
//! accepts connections from the shared listening socket and serves them to the end.
//!
//! Why not the process's work-stealing runtime: a request with a body makes hyper's
//! connection task wake itself twice (the handler asks for the body, then the body arrives
//! through a channel), and on a work-stealing runtime every such wake-up also unparks another
//! worker to come and steal: `bench/profile` found that scheduler traffic to be a third of
//! what a single-row predict cost beyond `/healthz` (BENCHMARKS.md has the figures). On a
//! single-threaded runtime a wake-up is a push onto a local queue. The trade: a connection stays on
//! one thread for its life; CPU-heavy request work (parsing a batch, a large predict) goes to the
//! blocking pool either way ([`super::AppState::cpu_bound`]).
//!
//! Every thread accepts from the shared socket (one held by a slow request leaves the others
//! accepting), but which thread accepts is the kernel's choice, and a burst of new connections
//! often all wake the same one: a load generator's 32 keep-alive connections could all land on
//! one thread and leave the other core idle for the whole run. So a thread that accepts a
//! connection serves it only if no thread has fewer open connections, and otherwise hands it to
//! the one with the fewest (`Threads`). A thread held by a long request takes nothing from its
//! inbox meanwhile, so a connection handed to it waits; it is handed no other until it takes that
//! one.
//!
//! Everything else (the folders, the cache follower) runs on the process's own runtime. I/O
//! resources belong to the runtime that created them, and a pooled database connection may be
//! opened by a request here and used later by a folder, so the serving runtimes are kept
//! alive, idle, until [`HttpServer::release`]: after the store is closed.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// How long a connection may take to send what it owes, and how much of its headers the server
/// reads before refusing them.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// From a connection's opening, or the end of its last response, to the end of the next
    /// request's headers: a client that sends nothing, or its headers a byte at a time, is
    /// disconnected after this long (idle keep-alive connections too).
    pub header_read_timeout: Duration,
    /// Bytes of a request's start line and headers that the connection reads before answering
    /// `431` (without a body: the connection answers before any request exists). The router
    /// refuses smaller limits in the error shape first ([`super::HeadLimits`]); this is the
    /// hard wall above them.
    pub max_header_bytes: usize,
    /// Header fields a request may have before the connection answers `431` (likewise).
    pub max_headers: usize,
}

impl ConnectionLimits {
    /// The walls above the router's limits: the router's own answer comes first.
    pub fn above(limits: &crate::config::Limits) -> Self {
        Self {
            header_read_timeout: Duration::from_secs(limits.header_read_timeout_secs.max(1)),
            max_header_bytes: limits.max_header_bytes.saturating_mul(4).max(16 * 1024),
            max_headers: limits.max_headers.saturating_mul(2).max(16),
        }
    }
}

/// The serving threads, started by [`HttpServer::start`].
pub struct HttpServer {
    /// One per thread: how its server ended.
    stopped: Vec<oneshot::Receiver<io::Result<()>>>,
    threads: Vec<JoinHandle<()>>,
    /// Stops the servers: the caller's shutdown, or dropping this.
    stop: CancellationToken,
    release: CancellationToken,
}

impl HttpServer {
    /// Serves `app` on `listener` from `threads` threads (at least one) until `shutdown` is
    /// cancelled (or one of the threads' servers ends); then each stops accepting and finishes
    /// its in-flight requests. Returns once every thread is serving.
    pub async fn start(
        listener: std::net::TcpListener,
        app: Router,
        threads: usize,
        connections: ConnectionLimits,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Self> {
        listener
            .set_nonblocking(true)
            .context("cannot make the listening socket non-blocking")?;
        let stop = shutdown.child_token();
        let release = CancellationToken::new();
        // Dropped on any early return below: whatever already serves stops.
        let mut server = Self {
            stopped: Vec::new(),
            threads: Vec::new(),
            stop: stop.clone(),
            release: release.clone(),
        };
        let (peers, inboxes) = Threads::new(threads.max(1));
        for (i, inbox) in inboxes.into_iter().enumerate() {
            // Every thread's listener is the same socket: the kernel hands each new connection
            // to one of the threads waiting in accept.
            let listener = listener
                .try_clone()
                .context("cannot share the listening socket")?;
            let (ready, started) = oneshot::channel();
            let (done, stopped) = oneshot::channel();
            let app = app.clone();
            let stop = stop.clone();
            let release = release.clone();
            let peers = peers.clone();
            // The runtime is built and dropped on its own thread, never inside the caller's.
            let thread = std::thread::Builder::new()
                .name(format!("mordant-http-{i}"))
                .spawn(move || {
                    let runtime = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(runtime) => runtime,
                        Err(e) => {
                            let _ = ready.send(Err(e).context("cannot start an HTTP runtime"));
                            return;
                        }
                    };
                    runtime.block_on(async move {
                        let listener = match TcpListener::from_std(listener) {
                            Ok(listener) => listener,
                            Err(e) => {
                                let _ = ready
                                    .send(Err(e).context("cannot register the listening socket"));
                                return;
                            }
                        };
                        let _ = ready.send(Ok(()));
                        let this = Member {
                            peers,
                            index: i,
                            inbox,
                        };
                        let result =
                            serve_among(listener, app, connections, stop.clone(), this).await;
                        // One server ending ends them all: none is left serving unnoticed.
                        stop.cancel();
                        let _ = done.send(result);
                        release.cancelled().await;
                    });
                })
                .context("cannot start an HTTP thread")?;
            server.threads.push(thread);
            server.stopped.push(stopped);
            started
                .await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("an HTTP thread ended while starting")))?;
        }
        Ok(server)
    }

    /// Waits until every thread has stopped serving (after shutdown, its in-flight requests
    /// answered), and says why the first that failed did.
    pub async fn stopped(&mut self) -> anyhow::Result<()> {
        let mut result = Ok(());
        for stopped in self.stopped.drain(..) {
            let outcome = match stopped.await {
                Ok(outcome) => outcome.context("the HTTP server failed"),
                Err(_) => Err(anyhow::anyhow!("an HTTP thread ended unexpectedly")),
            };
            if result.is_ok() {
                result = outcome;
            }
        }
        result
    }

    /// Lets the threads' runtimes go and joins the threads: call once nothing else uses an I/O
    /// resource they may have created (the store is closed).
    pub async fn release(mut self) {
        self.release.cancel();
        let threads = std::mem::take(&mut self.threads);
        let joined = tokio::task::spawn_blocking(move || {
            threads
                .into_iter()
                .filter_map(|thread| thread.join().err())
                .count()
        })
        .await;
        match joined {
            Ok(0) => {}
            Ok(panicked) => tracing::error!(threads = panicked, "HTTP threads panicked"),
            Err(e) => tracing::error!(error = %e, "cannot join the HTTP threads"),
        }
    }
}

/// A connection handed from the thread that accepted it to the one that serves it.
type Handed = (std::net::TcpStream, OpenConnection);

/// Open connections per serving thread, and each thread's inbox for the connections another
/// thread accepted and handed to it.
struct Threads {
    open: Vec<AtomicUsize>,
    /// Connections in a thread's inbox, not yet taken: a thread with one waiting is busy (held
    /// by a long request, it cannot take it) and is handed no other.
    pending: Vec<AtomicUsize>,
    inboxes: Vec<mpsc::UnboundedSender<Handed>>,
}

/// One serving thread's place among [`Threads`].
struct Member {
    peers: Arc<Threads>,
    index: usize,
    inbox: mpsc::UnboundedReceiver<Handed>,
}

impl Threads {
    fn new(count: usize) -> (Arc<Self>, Vec<mpsc::UnboundedReceiver<Handed>>) {
        let (inboxes, receivers) = (0..count).map(|_| mpsc::unbounded_channel()).unzip();
        let counters = || (0..count).map(|_| AtomicUsize::new(0)).collect();
        let threads = Self {
            open: counters(),
            pending: counters(),
            inboxes,
        };
        (Arc::new(threads), receivers)
    }

    /// The thread that should serve a connection thread `me` accepted: `me` unless another with
    /// nothing waiting in its inbox has fewer open connections; counted as open there until the
    /// returned guard drops. Two threads deciding at once may both pick the same one: a
    /// connection's difference, not a drift.
    fn assign(self: &Arc<Self>, me: usize) -> OpenConnection {
        let load = |i: usize| self.open[i].load(Ordering::Relaxed);
        let mut best = me;
        for i in 0..self.open.len() {
            if load(i) < load(best) && self.pending[i].load(Ordering::Relaxed) == 0 {
                best = i;
            }
        }
        self.open[best].fetch_add(1, Ordering::Relaxed);
        OpenConnection {
            peers: self.clone(),
            index: best,
        }
    }

    /// Sends a connection to its thread's inbox. If that thread has stopped, the connection is
    /// closed unanswered, as it would be had it arrived after the shutdown.
    fn hand_over(&self, tcp: TcpStream, open: OpenConnection) {
        let target = open.index;
        let std = match tcp.into_std() {
            Ok(std) => std,
            Err(e) => {
                tracing::debug!(error = %e, "cannot hand a connection to another thread");
                return;
            }
        };
        self.pending[target].fetch_add(1, Ordering::Relaxed);
        if self.inboxes[target].send((std, open)).is_err() {
            self.pending[target].fetch_sub(1, Ordering::Relaxed);
            tracing::debug!(target, "cannot hand a connection to a stopped thread");
        }
    }

    /// What thread `me` takes out of its inbox.
    fn taken(&self, me: usize, handed: Handed) -> Handed {
        self.pending[me].fetch_sub(1, Ordering::Relaxed);
        handed
    }
}

/// Counts a connection as open on its thread until dropped.
struct OpenConnection {
    peers: Arc<Threads>,
    index: usize,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.peers.open[self.index].fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection's socket that remembers whether its last write waited for the peer (its send
/// buffer full): hyper then still holds bytes of a response, which are owed to the client
/// whatever became of the handler.
struct Watched {
    tcp: TcpStream,
    blocked: Arc<AtomicBool>,
}

impl Watched {
    fn watch<T>(&self, poll: Poll<T>) -> Poll<T> {
        self.blocked.store(poll.is_pending(), Ordering::Release);
        poll
    }
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.watch(poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.watch(poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// A request of a connection in service, from the handler's call until hyper has written its
/// response's body (or dropped it): a connection with none at shutdown has nothing to finish.
struct Serving(Arc<AtomicUsize>);

impl Serving {
    fn enter(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(count))
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response's body that keeps its request [`Serving`] until it has been written.
struct Counted {
    body: Body,
    _serving: Serving,
}

impl hyper::body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Accepts connections on `listener` and serves each with `app` until `stop` is cancelled; then
/// stops accepting, closes idle connections and those still sending a request's head, and
/// returns once every connection's in-flight requests are answered and written.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) -> io::Result<()> {
    let (peers, mut inboxes) = Threads::new(1);
    let inbox = inboxes
        .pop()
        .ok_or_else(|| io::Error::other("no serving thread"))?;
    serve_among(
        listener,
        app,
        limits,
        stop,
        Member {
            peers,
            index: 0,
            inbox,
        },
    )
    .await
}

/// [`serve`] as one of several threads sharing `listener`: each connection is served by the
/// thread with the fewest open connections.
async fn serve_among(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
    mut this: Member,
) -> io::Result<()> {
    let connections = TaskTracker::new();
    loop {
        let (tcp, open) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    let open = this.peers.assign(this.index);
                    if open.index == this.index {
                        (tcp, open)
                    } else {
                        this.peers.hand_over(tcp, open);
                        continue;
                    }
                }
                // Out of file descriptors, or a connection reset before it was accepted: the
                // listener itself is fine. Pausing lets descriptors free up instead of spinning.
                Err(e) => {
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(handed) = this.inbox.recv() => {
                let (std, open) = this.peers.taken(this.index, handed);
                match TcpStream::from_std(std) {
                    Ok(tcp) => (tcp, open),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot take over a connection from another thread");
                        continue;
                    }
                }
            }
            () = stop.cancelled() => break,
        };
        // Answered as soon as their response is written, not after Nagle's delay for the
        // last segment.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let in_service = Arc::new(AtomicUsize::new(0));
        let blocked = Arc::new(AtomicBool::new(false));
        let tcp = Watched {
            tcp,
            blocked: Arc::clone(&blocked),
        };
        let counted = Arc::clone(&in_service);
        let router = app.clone();
        let service = TowerToHyperService::new(tower::service_fn(
            move |request: hyper::Request<Incoming>| {
                let serving = Serving::enter(&counted);
                let router = router.clone();
                async move {
                    let response = router.oneshot(request.map(Body::new)).await?;
                    Ok::<_, Infallible>(response.map(|body| Counted {
                        body,
                        _serving: serving,
                    }))
                }
            },
        ));
        let stop = stop.clone();
        connections.spawn(async move {
            let _open = open;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .max_header_size(limits.max_header_bytes)
                .max_headers(limits.max_headers);
            let connection = builder.serve_connection(TokioIo::new(tcp), service);
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    // hyper closes an idle connection and answers a request in service first;
                    // one with nothing in service and nothing left to write (hyper has taken a
                    // body's last bytes from the handler before the peer has read them) is
                    // still reading a head it may never finish (until `header_read_timeout`),
                    // and is closed unanswered, as a request arriving after the shutdown would
                    // be.
                    let mut tick = tokio::time::interval(Duration::from_millis(20));
                    loop {
                        tokio::select! {
                            biased;
                            result = connection.as_mut() => break result,
                            _ = tick.tick() => {
                                if in_service.load(Ordering::Acquire) == 0
                                    && !blocked.load(Ordering::Acquire)
                                {
                                    break Ok(());
                                }
                            }
                        }
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    // The socket stops taking connections now (once every thread has let go of it), not after
    // the in-flight requests below: a client that connects meanwhile is refused, not left
    // waiting in the backlog.
    drop(listener);
    // Connections handed over but not yet taken close now, unanswered, like any that arrive
    // after the shutdown, rather than wait for the in-flight requests below.
    this.inbox.close();
    while let Ok(handed) = this.inbox.try_recv() {
        drop(this.peers.taken(this.index, handed));
    }
    connections.close();
    connections.wait().await;
    Ok(())
}

impl Drop for HttpServer {
    /// A server dropped without [`HttpServer::release`] (its start failed part of the way, or
    /// its owner failed) stops serving, and its threads end once their servers have stopped.
    fn drop(&mut self) {
        self.stop.cancel();
        self.release.cancel();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    use axum::routing::get;

    use super::*;

    fn thread_name() -> String {
        std::thread::current().name().unwrap_or("?").to_owned()
    }

    const LIMITS: ConnectionLimits = ConnectionLimits {
        header_read_timeout: Duration::from_secs(30),
        max_header_bytes: 64 * 1024,
        max_headers: 200,
    };

    /// Bytes of `/large`'s body: more than the sockets' buffers hold, so that a reader that
    /// pauses leaves most of it in the server.
    const LARGE: usize = 16 << 20;

    /// How many `/slow` requests a test sends.
    const SLOW: usize = 6;

    /// A router whose `/block` holds its serving thread from the first to the second meeting
    /// at `meet` (the test is on the other side), and whose `/slow` waits without holding it,
    /// once all `SLOW` of them and the test have met at `entered`; all answer with the name of
    /// the thread that served them.
    fn app(meet: Arc<Barrier>, entered: Arc<tokio::sync::Barrier>) -> Router {
        Router::new()
            .route(
                "/block",
                get(move || async move {
                    meet.wait();
                    meet.wait();
                    thread_name()
                }),
            )
            .route(
                "/slow",
                get(move || async move {
                    entered.wait().await;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    thread_name()
                }),
            )
            .route("/name", get(|| async { thread_name() }))
            .route("/large", get(|| async { vec![b'x'; LARGE] }))
    }

    async fn start(
        threads: usize,
        meet: Arc<Barrier>,
        entered: Arc<tokio::sync::Barrier>,
    ) -> (HttpServer, String, CancellationToken) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let shutdown = CancellationToken::new();
        let server = HttpServer::start(
            listener,
            app(meet, entered),
            threads,
            LIMITS,
            shutdown.clone(),
        )
        .await
        .expect("start");
        (server, base, shutdown)
    }

    /// GET on a connection of its own, within 10 s.
    async fn get_text(url: String) -> String {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        let response = client.get(url).send().await.expect("an answer");
        assert_eq!(response.status(), 200);
        response.text().await.expect("a body")
    }

    #[tokio::test]
    async fn a_thread_held_by_one_request_leaves_the_others_serving() {
        let meet = Arc::new(Barrier::new(2));
        let (mut server, base, shutdown) =
            start(2, meet.clone(), Arc::new(tokio::sync::Barrier::new(1))).await;
        let blocked = tokio::spawn(get_text(format!("{base}/block")));
        let wait = meet.clone();
        tokio::task::spawn_blocking(move || wait.wait())
            .await
            .expect("the blocking request holds its thread");
        // Served while that thread is held (with one thread, this would time out).
        let other = get_text(format!("{base}/name")).await;
        assert!(!blocked.is_finished());
        tokio::task::spawn_blocking(move || meet.wait())
            .await
            .expect("released");
        let blocking = blocked.await.expect("the blocking request");
        assert!(blocking.starts_with("mordant-http-"), "{blocking}");
        assert!(other.starts_with("mordant-http-"), "{other}");
        assert_ne!(blocking, other);
        shutdown.cancel();
        server.stopped().await.expect("stopped cleanly");
        server.release().await;
    }

    #[tokio::test]
    async fn shutdown_finishes_in_flight_requests_then_stops_accepting() {
        let entered = Arc::new(tokio::sync::Barrier::new(SLOW + 1));
        let (mut server, base, shutdown) =
            start(3, Arc::new(Barrier::new(2)), entered.clone()).await;
        let in_flight: Vec<_> = (0..SLOW)
            .map(|_| tokio::spawn(get_text(format!("{base}/slow"))))
            .collect();
        // Every request is in its handler.
        entered.wait().await;
        shutdown.cancel();
        for request in in_flight {
            let served_by = request.await.expect("answered despite the shutdown");
            assert!(served_by.starts_with("mordant-http-"), "{served_by}");
        }
        tokio::time::timeout(Duration::from_secs(5), server.stopped())
            .await
            .expect("every thread stops")
            .expect("cleanly");
        let refused = reqwest::Client::new()
            .get(format!("{base}/name"))
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        assert!(
            refused.is_err(),
            "still serving after shutdown: {refused:?}"
        );
        server.release().await;
    }

    /// A client that has sent part of a request's head, and may never send the rest, does not
    /// hold the shutdown for the header-read timeout (30 s here): nothing of it is in service,
    /// so its connection is closed at once, while a request in a handler is still answered and
    /// the socket refuses new connections meanwhile.
    #[tokio::test]
    async fn a_half_sent_request_does_not_hold_the_shutdown() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let entered = Arc::new(tokio::sync::Barrier::new(2));
        let (mut server, base, shutdown) =
            start(1, Arc::new(Barrier::new(2)), entered.clone()).await;
        let address = base.trim_start_matches("http://").to_owned();
        let mut half = tokio::net::TcpStream::connect(&address)
            .await
            .expect("connected");
        half.write_all(b"GET /na").await.expect("part of a head");
        let slow = tokio::spawn(get_text(format!("{base}/slow")));
        entered.wait().await;
        shutdown.cancel();
        // While that request is still in its handler, the socket already refuses newcomers.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!slow.is_finished(), "the handler takes 300 ms");
        let newcomer = tokio::net::TcpStream::connect(&address).await;
        assert!(
            newcomer.is_err(),
            "accepted during the shutdown: {newcomer:?}"
        );
        let served_by = slow.await.expect("answered despite the shutdown");
        assert!(served_by.starts_with("mordant-http-"), "{served_by}");
        tokio::time::timeout(Duration::from_secs(10), server.stopped())
            .await
            .expect("stopped without waiting for the rest of the head")
            .expect("cleanly");
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), half.read_to_end(&mut rest)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "the half-sent request's connection is closed, unanswered: {read:?} {rest:?}"
        );
        server.release().await;
    }

    /// A response whose body is still being written when the shutdown comes (a reader that
    /// paused) is written to its end before the connection closes.
    #[tokio::test]
    async fn a_response_still_being_written_is_finished_at_shutdown() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut server, base, shutdown) = start(
            1,
            Arc::new(Barrier::new(2)),
            Arc::new(tokio::sync::Barrier::new(1)),
        )
        .await;
        let mut tcp = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
            .await
            .expect("connected");
        tcp.write_all(b"GET /large HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .expect("request sent");
        let mut answer = vec![0u8; 4096];
        let first = tcp.read(&mut answer).await.expect("the answer begins");
        answer.truncate(first);
        // The server fills the sockets' buffers and waits for the reader.
        tokio::time::sleep(Duration::from_millis(200)).await;
        shutdown.cancel();
        tokio::time::sleep(Duration::from_millis(200)).await;
        tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer))
            .await
            .expect("the answer ends")
            .expect("read");
        let head_end = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a head")
            + 4;
        assert_eq!(answer.len() - head_end, LARGE, "the body was cut short");
        tokio::time::timeout(Duration::from_secs(10), server.stopped())
            .await
            .expect("stopped")
            .expect("cleanly");
        server.release().await;
    }

    /// Sends `GET /name` on an open connection and returns the body: the serving thread's name.
    async fn name_on(tcp: &mut tokio::net::TcpStream) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        tcp.write_all(b"GET /name HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .expect("request sent");
        let mut answer = Vec::new();
        let mut chunk = [0u8; 512];
        loop {
            let read = tcp.read(&mut chunk).await.expect("answer read");
            assert!(read > 0, "connection closed mid-answer");
            answer.extend_from_slice(&chunk[..read]);
            let text = String::from_utf8_lossy(&answer).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length: "))
                    .expect("a content length")
                    .parse()
                    .expect("a number");
                if body.len() >= length {
                    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                    return body.to_owned();
                }
            }
        }
    }

    #[tokio::test]
    async fn connections_are_spread_evenly_over_the_threads() {
        const THREADS: usize = 4;
        const PER_THREAD: usize = 4;
        let (mut server, base, shutdown) = start(
            THREADS,
            Arc::new(Barrier::new(2)),
            Arc::new(tokio::sync::Barrier::new(1)),
        )
        .await;
        let addr = base.trim_start_matches("http://").to_owned();
        // Opened one after the other and all kept open: whichever thread the kernel wakes to
        // accept each, it is served by one with the fewest.
        let mut open = Vec::new();
        let mut served = std::collections::BTreeMap::<String, usize>::new();
        for _ in 0..THREADS * PER_THREAD {
            let mut tcp = tokio::net::TcpStream::connect(&addr)
                .await
                .expect("connect");
            let name = name_on(&mut tcp).await;
            *served.entry(name.clone()).or_default() += 1;
            open.push((tcp, name));
        }
        assert_eq!(served.len(), THREADS, "{served:?}");
        assert!(served.values().all(|&n| n == PER_THREAD), "{served:?}");
        // Each connection stays on its thread for its life.
        for (i, (tcp, first)) in open.iter_mut().enumerate() {
            assert_eq!(&name_on(tcp).await, first, "connection {i}");
        }
        drop(open);
        shutdown.cancel();
        server.stopped().await.expect("stopped cleanly");
        server.release().await;
    }

    #[tokio::test]
    async fn a_connection_counts_on_its_thread_until_it_ends_and_busy_inboxes_get_no_more() {
        let (peers, mut inboxes) = Threads::new(2);
        let counts = |what: &[AtomicUsize]| -> Vec<usize> {
            what.iter().map(|c| c.load(Ordering::Relaxed)).collect()
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let mut accepted = Vec::new();
        let mut clients = Vec::new();
        for _ in 0..2 {
            clients.push(TcpStream::connect(addr).await.expect("connect"));
            accepted.push(listener.accept().await.expect("accept").0);
        }
        let first = peers.assign(0);
        assert_eq!(first.index, 0);
        let second = peers.assign(0);
        assert_eq!(second.index, 1, "thread 1 had fewer open");
        peers.hand_over(accepted.pop().expect("a connection"), second);
        assert_eq!(counts(&peers.open), [1, 1]);
        assert_eq!(counts(&peers.pending), [0, 1]);
        let third = peers.assign(0);
        assert_eq!(third.index, 0, "a tie: the thread that accepted it");
        // While its inbox holds one, thread 1 is handed nothing, though it has fewer open.
        let fourth = peers.assign(0);
        assert_eq!(fourth.index, 0);
        assert_eq!(counts(&peers.open), [3, 1]);
        let handed = inboxes[1].try_recv().expect("handed to thread 1");
        let (_std, taken) = peers.taken(1, handed);
        assert_eq!(counts(&peers.pending), [0, 0]);
        let fifth = peers.assign(0);
        assert_eq!(fifth.index, 1, "thread 1 has fewer open and an empty inbox");
        // A thread that has stopped: the connection is closed and counted nowhere.
        inboxes[1].close();
        peers.hand_over(accepted.pop().expect("a connection"), fifth);
        assert_eq!(counts(&peers.pending), [0, 0]);
        assert_eq!(counts(&peers.open), [3, 1]);
        drop((first, third, fourth, taken));
        assert_eq!(counts(&peers.open), [0, 0]);
    }

    #[tokio::test]
    async fn a_dropped_server_stops_serving() {
        let (server, base, _shutdown) = start(
            2,
            Arc::new(Barrier::new(2)),
            Arc::new(tokio::sync::Barrier::new(1)),
        )
        .await;
        assert!(
            get_text(format!("{base}/name"))
                .await
                .starts_with("mordant-http-")
        );
        drop(server);
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()
            .expect("client");
        let mut refused = false;
        for _ in 0..50 {
            if client.get(format!("{base}/name")).send().await.is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(refused, "still serving 5 s after the server was dropped");
    }
}
