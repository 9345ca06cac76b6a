//! The work rows between the capacity side and the metal side, typed: what capacity asks of
//! metal (`MetalWork`) and what metal tells capacity (`CapacityNotice`). With the two work
//! tables these are the whole contract between the sides. Each row's kind and unique key
//! come from here, and its payload is the variant's struct as camelCase JSON (rows queued
//! before these types existed read the same).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Work for the metal side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetalWork {
    /// `lease.start`: a node binding's start came.
    LeaseStart(LeaseStart),
    /// `lease.end`: an allocation was released, ran out or failed.
    LeaseEnd(LeaseEnd),
    /// `pool.retire`: a deleted tenant's pool; its machines retire.
    PoolRetire(PoolRetire),
}

/// Notices for the capacity side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapacityNotice {
    /// `lease.bound`: the node deployed the lessee's profile.
    LeaseBound(LeaseNotice),
    /// `lease.refused`: the lease could not start (the node untouched).
    LeaseRefused(LeaseNotice),
    /// `lease.failed`: the lease start failed (the node quarantined).
    LeaseFailed(LeaseNotice),
}

/// What `lease.start` carries: capacity's allocation of one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseStart {
    /// The reservation.
    pub reservation: String,
    /// The allocation (the lease's id on the node).
    pub allocation: String,
    /// The node.
    pub node: String,
    /// The lessee.
    pub tenant: String,
    /// The profile to deploy.
    pub profile_id: String,
    /// Its exact version (required).
    pub profile_version: Option<u32>,
}

/// What `lease.end` carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseEnd {
    /// The reservation.
    pub reservation: String,
    /// The allocation that ended.
    pub allocation: String,
    /// The node.
    pub node: String,
    /// Why it ended.
    pub reason: String,
}

/// What `pool.retire` carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRetire {
    /// The pool.
    pub pool: String,
    /// Why (the tenant's deletion).
    pub reason: String,
}

/// What a notice about one allocation carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseNotice {
    /// The reservation.
    pub reservation: String,
    /// The allocation.
    pub allocation: String,
    /// The node.
    pub node: String,
    /// Why it was refused or failed (none when it bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

fn payload<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("a work payload is plain data")
}

fn parse<T: DeserializeOwned>(kind: &str, payload: &Value) -> Result<T, String> {
    serde_json::from_value(payload.clone()).map_err(|e| format!("{kind} payload: {e}"))
}

impl MetalWork {
    /// The row's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            MetalWork::LeaseStart(_) => "lease.start",
            MetalWork::LeaseEnd(_) => "lease.end",
            MetalWork::PoolRetire(_) => "pool.retire",
        }
    }

    /// The row's unique key: asking twice is asking once.
    pub fn key(&self) -> String {
        match self {
            MetalWork::LeaseStart(w) => format!("lease-start/{}", w.allocation),
            MetalWork::LeaseEnd(w) => format!("lease-end/{}", w.allocation),
            MetalWork::PoolRetire(w) => format!("pool-retire/{}", w.pool),
        }
    }

    /// The row's payload.
    pub fn payload(&self) -> Value {
        match self {
            MetalWork::LeaseStart(w) => payload(w),
            MetalWork::LeaseEnd(w) => payload(w),
            MetalWork::PoolRetire(w) => payload(w),
        }
    }

    /// Reads a row back; `Ok(None)` for a kind this version does not know.
    pub fn parse(kind: &str, payload: &Value) -> Result<Option<Self>, String> {
        Ok(Some(match kind {
            "lease.start" => MetalWork::LeaseStart(parse(kind, payload)?),
            "lease.end" => MetalWork::LeaseEnd(parse(kind, payload)?),
            "pool.retire" => MetalWork::PoolRetire(parse(kind, payload)?),
            _ => return Ok(None),
        }))
    }
}

impl CapacityNotice {
    /// The row's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            CapacityNotice::LeaseBound(_) => "lease.bound",
            CapacityNotice::LeaseRefused(_) => "lease.refused",
            CapacityNotice::LeaseFailed(_) => "lease.failed",
        }
    }

    /// The row's unique key.
    pub fn key(&self) -> String {
        match self {
            CapacityNotice::LeaseBound(n) => format!("lease-bound/{}", n.allocation),
            CapacityNotice::LeaseRefused(n) => format!("lease-refused/{}", n.allocation),
            CapacityNotice::LeaseFailed(n) => format!("lease-failed/{}", n.allocation),
        }
    }

    /// What every notice carries.
    pub fn lease(&self) -> &LeaseNotice {
        match self {
            CapacityNotice::LeaseBound(n) | CapacityNotice::LeaseRefused(n) | CapacityNotice::LeaseFailed(n) => n,
        }
    }

    /// The row's payload.
    pub fn payload(&self) -> Value {
        payload(self.lease())
    }

    /// Reads a row back; `Ok(None)` for a kind this version does not know.
    pub fn parse(kind: &str, payload: &Value) -> Result<Option<Self>, String> {
        Ok(Some(match kind {
            "lease.bound" => CapacityNotice::LeaseBound(parse(kind, payload)?),
            "lease.refused" => CapacityNotice::LeaseRefused(parse(kind, payload)?),
            "lease.failed" => CapacityNotice::LeaseFailed(parse(kind, payload)?),
            _ => return Ok(None),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_back_as_they_were_written_and_unknown_kinds_are_none() {
        let start = MetalWork::LeaseStart(LeaseStart {
            reservation: "r1".into(),
            allocation: "a1".into(),
            node: "n1".into(),
            tenant: "t".into(),
            profile_id: "p".into(),
            profile_version: Some(2),
        });
        assert_eq!((start.kind(), start.key().as_str()), ("lease.start", "lease-start/a1"));
        assert_eq!(MetalWork::parse(start.kind(), &start.payload()), Ok(Some(start.clone())));
        assert_eq!(start.payload()["profileId"], "p", "camelCase, as rows were before the types");
        let end = MetalWork::LeaseEnd(LeaseEnd {
            reservation: "r1".into(),
            allocation: "a1".into(),
            node: "n1".into(),
            reason: "released".into(),
        });
        assert_eq!(MetalWork::parse("lease.end", &end.payload()), Ok(Some(end)));
        assert_eq!(MetalWork::parse("lease.sideways", &Value::Null), Ok(None));
        let bad = MetalWork::parse("pool.retire", &serde_json::json!({"pool": 1})).unwrap_err();
        assert!(bad.starts_with("pool.retire payload: "), "{bad}");

        // A bound notice queued with the event's fields (tenant, profile) still reads.
        let old = serde_json::json!({"node": "n1", "allocation": "a1", "reservation": "r1", "tenant": "t",
                                     "profile": "p", "version": 2});
        let bound = CapacityNotice::parse("lease.bound", &old).unwrap().unwrap();
        assert_eq!(
            (bound.kind(), bound.key().as_str(), bound.lease().reason.as_deref()),
            ("lease.bound", "lease-bound/a1", None)
        );
        let failed = CapacityNotice::LeaseFailed(LeaseNotice { reason: Some("boom".into()), ..bound.lease().clone() });
        assert_eq!(CapacityNotice::parse("lease.failed", &failed.payload()), Ok(Some(failed)));
    }
}
