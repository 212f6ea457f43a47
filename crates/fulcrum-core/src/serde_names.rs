//! Serde for the closed sets (rules, estimators, BA count): they (de)serialise as their spec
//! names through `name()` / `FromStr`, so a config file spells them exactly as the CLI does, and
//! an unknown name fails with the list of valid ones.

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use crate::{BaCount, Estimator, Rule};

macro_rules! by_name {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(de::Error::custom)
            }
        }
    };
}

by_name!(Rule);
by_name!(Estimator);
by_name!(BaCount);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_json() {
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
}
