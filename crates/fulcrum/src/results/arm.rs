//! One arm of a comparison, spelled in one place: a rule (`ba`), or in a grid over policy
//! losses a rule and a loss, labelled `ba+gspo` in tables and charts and stored in run
//! directories `ba-gspo-seed<S>`. `compare` writes these names, `report` reads them back.

/// A rule, and the policy loss when the grid varies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arm<'a> {
    pub rule: &'a str,
    pub loss: Option<&'a str>,
}

impl<'a> Arm<'a> {
    /// The arm a label names (`ba` or `ba+gspo`).
    pub fn parse(label: &'a str) -> Self {
        match label.split_once('+') {
            Some((rule, loss)) => Arm {
                rule,
                loss: Some(loss),
            },
            None => Arm {
                rule: label,
                loss: None,
            },
        }
    }

    /// The label of tables and charts: `ba`, `ba+gspo`.
    pub fn label(&self) -> String {
        match self.loss {
            Some(l) => format!("{}+{l}", self.rule),
            None => self.rule.to_string(),
        }
    }

    /// The run directory of one seed: `ba-seed0`, `ba-gspo-seed0`.
    pub fn run_dir_name(&self, seed: u64) -> String {
        match self.loss {
            Some(l) => format!("{}-{l}-seed{seed}", self.rule),
            None => format!("{}-seed{seed}", self.rule),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_directories_round_trip() {
        let a = Arm::parse("ba+clip-cov");
        assert_eq!(
            a,
            Arm {
                rule: "ba",
                loss: Some("clip-cov")
            }
        );
        assert_eq!(a.label(), "ba+clip-cov");
        assert_eq!(a.run_dir_name(2), "ba-clip-cov-seed2");
        let r = Arm::parse("token-group");
        assert_eq!(r.label(), "token-group");
        assert_eq!(r.run_dir_name(0), "token-group-seed0");
    }
}
