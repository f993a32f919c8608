//! Tabular data for `mordant evaluate`: numeric CSV columns chosen by name prefix.

use std::path::Path;

use anyhow::{Context, bail};
use faer::Mat;

/// Inputs of the dyeing data set: fabric category, lab-dip spectrum, lab-dip recipe.
pub const DYEING_FEATURE_PREFIXES: [&str; 3] = ["小缸面料大类", "小缸光谱", "小缸配方组合"];
/// Outputs of the dyeing data set: the bulk recipe.
pub const DYEING_OUTPUT_PREFIXES: [&str; 1] = ["大缸物料代码"];

/// Rows of inputs `x` and targets `y`, with the names of their columns.
#[derive(Clone, Debug)]
pub struct Dataset {
    pub feature_names: Vec<String>,
    pub output_names: Vec<String>,
    pub x: Mat<f64>,
    pub y: Mat<f64>,
}

impl Dataset {
    pub fn rows(&self) -> usize {
        self.x.nrows()
    }

    /// Reads a CSV file with a header row; features and outputs are the columns whose names
    /// start with one of the given prefixes, in file order.
    pub fn from_csv(
        path: &Path,
        feature_prefixes: &[String],
        output_prefixes: &[String],
    ) -> anyhow::Result<Self> {
        let file = std::fs::File::open(path)
            .with_context(|| format!("cannot open data file {}", path.display()))?;
        Self::from_reader(file, feature_prefixes, output_prefixes)
            .with_context(|| format!("cannot read data file {}", path.display()))
    }

    pub fn from_reader(
        reader: impl std::io::Read,
        feature_prefixes: &[String],
        output_prefixes: &[String],
    ) -> anyhow::Result<Self> {
        let mut csv = csv::ReaderBuilder::new()
            .has_headers(true)
            .from_reader(reader);
        let header: Vec<String> = csv
            .headers()
            .context("no header row")?
            .iter()
            .map(|h| h.trim_start_matches('\u{feff}').to_owned())
            .collect();
        let select = |prefixes: &[String]| -> Vec<usize> {
            (0..header.len())
                .filter(|&i| prefixes.iter().any(|p| header[i].starts_with(p.as_str())))
                .collect()
        };
        let features = select(feature_prefixes);
        let outputs = select(output_prefixes);
        if features.is_empty() {
            bail!("no column name starts with any of the feature prefixes {feature_prefixes:?}");
        }
        if outputs.is_empty() {
            bail!("no column name starts with any of the output prefixes {output_prefixes:?}");
        }
        if let Some(&both) = features.iter().find(|i| outputs.contains(i)) {
            bail!(
                "column {:?} matches both a feature and an output prefix",
                header[both]
            );
        }
        let mut xs = Vec::new();
        let mut ys = Vec::new();
        for (r, record) in csv.records().enumerate() {
            let record = record.with_context(|| format!("bad CSV record at data row {}", r + 1))?;
            let parse = |i: usize| -> anyhow::Result<f64> {
                let raw = record.get(i).unwrap_or("").trim();
                let value: f64 = raw.parse().with_context(|| {
                    format!(
                        "data row {}, column {:?}: {raw:?} is not a number",
                        r + 1,
                        header[i]
                    )
                })?;
                if !value.is_finite() {
                    bail!(
                        "data row {}, column {:?}: {raw:?} is not finite",
                        r + 1,
                        header[i]
                    );
                }
                Ok(value)
            };
            xs.push(
                features
                    .iter()
                    .map(|&i| parse(i))
                    .collect::<anyhow::Result<Vec<_>>>()?,
            );
            ys.push(
                outputs
                    .iter()
                    .map(|&i| parse(i))
                    .collect::<anyhow::Result<Vec<_>>>()?,
            );
        }
        if xs.is_empty() {
            bail!("the file has no data rows");
        }
        Ok(Self {
            feature_names: features.iter().map(|&i| header[i].clone()).collect(),
            output_names: outputs.iter().map(|&i| header[i].clone()).collect(),
            x: Mat::from_fn(xs.len(), features.len(), |i, j| xs[i][j]),
            y: Mat::from_fn(ys.len(), outputs.len(), |i, j| ys[i][j]),
        })
    }

    /// The rows at `indices`, in that order.
    pub fn select(&self, indices: &[usize]) -> (Mat<f64>, Mat<f64>) {
        (
            Mat::from_fn(indices.len(), self.x.ncols(), |i, j| {
                self.x[(indices[i], j)]
            }),
            Mat::from_fn(indices.len(), self.y.ncols(), |i, j| {
                self.y[(indices[i], j)]
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefixes(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn selects_columns_by_prefix_in_file_order() {
        let csv = "id,a1,b1,a0,b0\n7,1,2,3,4\n8,5,6,7,8\n";
        let d = Dataset::from_reader(csv.as_bytes(), &prefixes(&["a"]), &prefixes(&["b"])).unwrap();
        assert_eq!(d.feature_names, vec!["a1", "a0"]);
        assert_eq!(d.output_names, vec!["b1", "b0"]);
        assert_eq!(d.x[(1, 1)], 7.0);
        assert_eq!(d.y[(0, 1)], 4.0);
    }

    #[test]
    fn names_the_cell_that_is_not_a_number() {
        let csv = "a,b\n1,2\n3,x\n";
        let err =
            Dataset::from_reader(csv.as_bytes(), &prefixes(&["a"]), &prefixes(&["b"])).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("data row 2") && msg.contains("\"b\""), "{msg}");
    }

    #[test]
    fn refuses_non_finite_values_and_missing_columns() {
        let csv = "a,b\n1,NaN\n";
        assert!(
            Dataset::from_reader(csv.as_bytes(), &prefixes(&["a"]), &prefixes(&["b"])).is_err()
        );
        let csv = "a,b\n1,2\n";
        assert!(
            Dataset::from_reader(csv.as_bytes(), &prefixes(&["z"]), &prefixes(&["b"])).is_err()
        );
    }
}
