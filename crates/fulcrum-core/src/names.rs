//! Spelling of closed sets: each set's names are written once, in its [`closed_set!`]
//! declaration, which gives the enum `ALL`, `name()`, `FromStr` (an unknown name lists every
//! valid one and suggests the nearest), `Display` and serde by name. Config files, the command
//! line, metric keys and plots all spell a value the same way.
//!
//! [`unknown_name`] builds the same error for open sets known at run time (task names).

use crate::CoreError;

/// Declares a closed set: an enum whose every variant has one spelling.
///
/// ```
/// fulcrum_core::closed_set! {
///     /// How loud.
///     pub enum Volume("volume") {
///         /// Quiet.
///         Low = "low",
///         High = "high",
///     }
/// }
/// assert_eq!("high".parse::<Volume>().unwrap(), Volume::High);
/// assert_eq!(Volume::Low.name(), "low");
/// let err = "hihg".parse::<Volume>().unwrap_err().to_string();
/// assert!(err.contains("valid volumes: low, high (did you mean high?)"), "{err}");
/// ```
#[macro_export]
macro_rules! closed_set {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($kind:literal) {
            $($(#[$vmeta:meta])* $variant:ident = $spelling:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The one spelling of this value.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $spelling),+
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::CoreError;
            fn from_str(s: &str) -> ::std::result::Result<Self, $crate::CoreError> {
                $crate::names::parse_name($kind, s, &[$(($spelling, $name::$variant)),+])
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl $crate::__serde::Serialize for $name {
            fn serialize<S: $crate::__serde::Serializer>(
                &self,
                s: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> $crate::__serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::__serde::Deserializer<'de>>(
                d: D,
            ) -> ::std::result::Result<Self, D::Error> {
                let s = <::std::string::String as $crate::__serde::Deserialize>::deserialize(d)?;
                s.parse().map_err(<D::Error as $crate::__serde::de::Error>::custom)
            }
        }
    };
}

/// Parses `got` against `(name, value)` pairs, or says which names are valid.
pub fn parse_name<T: Copy>(
    kind: &'static str,
    got: &str,
    table: &[(&'static str, T)],
) -> Result<T, CoreError> {
    match table.iter().find(|(n, _)| *n == got) {
        Some((_, v)) => Ok(*v),
        None => Err(unknown_name(
            kind,
            got,
            &table.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        )),
    }
}

/// The error for a name that is not among `valid`: every valid name, and the nearest one when
/// it is close enough to be a likely typo.
pub fn unknown_name(kind: &'static str, got: &str, valid: &[&str]) -> CoreError {
    let nearest = valid
        .iter()
        .map(|n| (edit_distance(&got.to_ascii_lowercase(), n), *n))
        .min();
    let suggestion = match nearest {
        Some((d, n)) if d <= 2.max(got.len() / 3) => Some(n.to_string()),
        _ => None,
    };
    CoreError::UnknownName {
        kind,
        got: got.to_string(),
        valid: valid.join(", "),
        suggestion,
    }
}

/// Levenshtein distance over chars; names are short, so the quadratic table is fine.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_name_lists_valid_names_and_nearest() {
        let table = [("ba", 0), ("ba-batch", 1), ("token", 2)];
        let err = parse_name("rule", "ba_batch", &table).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("unknown rule \"ba_batch\""), "{text}");
        assert!(text.contains("valid rules: ba, ba-batch, token"), "{text}");
        assert!(text.contains("did you mean ba-batch?"), "{text}");
        assert_eq!(parse_name("rule", "token", &table), Ok(2));
    }

    #[test]
    fn far_names_get_no_suggestion() {
        let table = [("ba", 0), ("token", 2)];
        let err = parse_name("rule", "completely-different", &table).unwrap_err();
        assert!(!err.to_string().contains("did you mean"));
    }

    #[test]
    fn names_round_trip_through_json() {
        use crate::{BaCount, Estimator, Rule};
        let v = serde_json::to_string(&Rule::BaBatch).unwrap();
        assert_eq!(v, "\"ba-batch\"");
        assert_eq!(serde_json::from_str::<Rule>(&v).unwrap(), Rule::BaBatch);
        let err = serde_json::from_str::<Estimator>("\"grp\"")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("valid advantage estimators: grpo, mean, rloo, opo"),
            "{err}"
        );
        assert_eq!(
            serde_json::from_str::<BaCount>("\"signed\"").unwrap(),
            BaCount::Signed
        );
    }

    crate::closed_set! {
        enum Colour("colour") {
            Red = "red",
            Light = "light-blue",
        }
    }

    #[test]
    fn a_closed_set_round_trips_through_its_names_and_serde() {
        for c in Colour::ALL {
            assert_eq!(c.name().parse::<Colour>().unwrap(), *c);
            let json = serde_json::to_string(c).unwrap();
            assert_eq!(serde_json::from_str::<Colour>(&json).unwrap(), *c);
        }
        assert_eq!(Colour::Light.to_string(), "light-blue");
        let err = serde_json::from_str::<Colour>("\"light_blue\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("did you mean light-blue?"), "{err}");
    }
}
