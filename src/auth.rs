//! API keys and what they may do.
//!
//! A key is `mdk_` followed by 64 hex digits (256 bits from the operating system's random
//! source). The service stores only its SHA-256 and checks every request against an in-memory
//! [`KeyRing`], so authentication never waits on the database: predict keeps answering while
//! PostgreSQL is down, and revoking a key reaches every replica by notification.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

use rand::TryRngCore;
use rand::rngs::OsRng;
use sha2::{Digest, Sha256};

use crate::store::{Store, StoreError};

pub use crate::domain::Scope;

/// The prefix every key starts with (it makes leaked keys easy to find with a secret scanner).
pub const KEY_PREFIX: &str = "mdk_";
/// The shortest bootstrap admin key accepted from configuration.
pub const MIN_CONFIGURED_KEY_LEN: usize = 32;

/// A new random key, as shown (once) to whoever created it.
pub fn generate_key() -> Result<String, rand::rand_core::OsError> {
    let mut bytes = [0u8; 32];
    OsRng.try_fill_bytes(&mut bytes)?;
    let mut key = String::with_capacity(KEY_PREFIX.len() + 64);
    key.push_str(KEY_PREFIX);
    for b in bytes {
        key.push(char::from(HEX[usize::from(b >> 4)]));
        key.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    Ok(key)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The stored form of a key: SHA-256 of its text.
pub fn hash_key(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// The part of a key that listings show: the prefix and 8 hex digits.
pub fn display_prefix(key: &str) -> String {
    key.chars().take(KEY_PREFIX.len() + 8).collect()
}

/// Who is calling: a stored key (with its id) or the bootstrap admin key from configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// `None` for the bootstrap key.
    pub key_id: Option<i64>,
    pub name: String,
    pub scopes: Vec<Scope>,
}

impl Principal {
    /// Whether this caller holds one of `allowed` (admin holds every scope).
    pub fn may(&self, allowed: &[Scope]) -> bool {
        self.scopes
            .iter()
            .any(|s| *s == Scope::Admin || allowed.contains(s))
    }
}

/// The keys that are valid now, by hash.
pub struct KeyRing {
    /// `false`: development without a configured admin key, every request is let through.
    enforced: bool,
    bootstrap: Option<[u8; 32]>,
    inner: RwLock<Keys>,
}

#[derive(Default)]
struct Keys {
    by_hash: HashMap<[u8; 32], Principal>,
    /// Ids revoked while this process ran. Key ids are never reused, so a snapshot read before
    /// a revocation committed can never bring the key back.
    revoked: HashSet<i64>,
}

/// The outcome of checking a request's key.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The key is valid (or keys are not enforced).
    Allowed(Option<Principal>),
    /// No key, or one that is unknown or revoked.
    Unauthenticated,
    /// A valid key without any of the required scopes.
    Forbidden(Principal),
}

impl KeyRing {
    /// A ring that enforces keys, with `admin_key` (from configuration) valid for every scope.
    pub fn enforced(admin_key: Option<&str>) -> Self {
        Self {
            enforced: true,
            bootstrap: admin_key.map(hash_key),
            inner: RwLock::default(),
        }
    }

    /// A ring that lets every request through (development without an admin key).
    pub fn open() -> Self {
        Self {
            enforced: false,
            bootstrap: None,
            inner: RwLock::default(),
        }
    }

    pub fn is_enforced(&self) -> bool {
        self.enforced
    }

    /// Checks a presented key (`None`: no key was presented) against the scopes allowed.
    pub fn check(&self, presented: Option<&str>, allowed: &[Scope]) -> Verdict {
        if !self.enforced {
            return Verdict::Allowed(None);
        }
        let Some(key) = presented else {
            return Verdict::Unauthenticated;
        };
        let hash = hash_key(key);
        let principal = if self.bootstrap == Some(hash) {
            Principal {
                key_id: None,
                name: "bootstrap admin key".to_owned(),
                scopes: vec![Scope::Admin],
            }
        } else {
            let keys = self.inner.read().unwrap_or_else(|e| e.into_inner());
            match keys.by_hash.get(&hash) {
                Some(p) => p.clone(),
                None => return Verdict::Unauthenticated,
            }
        };
        if principal.may(allowed) {
            Verdict::Allowed(Some(principal))
        } else {
            Verdict::Forbidden(principal)
        }
    }

    /// Replaces the stored keys with the database's active ones. Keys this process created
    /// after the snapshot was read are kept; keys it revoked are never brought back.
    pub async fn sync(&self, store: &Store) -> Result<(), StoreError> {
        let (newest, active) = store.active_keys().await?;
        let active = active
            .into_iter()
            .map(|k| {
                let principal = Principal {
                    key_id: Some(k.id),
                    name: k.name,
                    scopes: k.scopes,
                };
                (k.hash, principal)
            })
            .collect();
        self.replace(newest, active);
        Ok(())
    }

    /// Installs a snapshot of the active keys, taken when `newest` was the highest key id:
    /// keys newer than that (created here after the snapshot) are kept, and every key revoked
    /// here is dropped.
    fn replace(&self, newest: i64, snapshot: Vec<([u8; 32], Principal)>) {
        let mut keys = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let Keys { by_hash, revoked } = &mut *keys;
        let mut fresh: HashMap<[u8; 32], Principal> = by_hash
            .drain()
            .filter(|(_, p)| p.key_id.is_some_and(|id| id > newest))
            .collect();
        fresh.extend(snapshot);
        fresh.retain(|_, p| p.key_id.is_none_or(|id| !revoked.contains(&id)));
        *by_hash = fresh;
    }

    /// Makes a key valid at once in this process (others learn it by notification).
    pub fn insert(&self, hash: [u8; 32], principal: Principal) {
        let mut keys = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if principal
            .key_id
            .is_some_and(|id| keys.revoked.contains(&id))
        {
            return;
        }
        keys.by_hash.insert(hash, principal);
    }

    /// Makes a key invalid at once in this process, for good.
    pub fn revoke(&self, key_id: i64) {
        let mut keys = self.inner.write().unwrap_or_else(|e| e.into_inner());
        keys.revoked.insert(key_id);
        keys.by_hash.retain(|_, p| p.key_id != Some(key_id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_random_hex_with_the_prefix() {
        let a = generate_key().unwrap();
        let b = generate_key().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), KEY_PREFIX.len() + 64);
        assert!(a.starts_with(KEY_PREFIX));
        assert!(a[KEY_PREFIX.len()..].bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(display_prefix(&a), a[..12]);
    }

    #[test]
    fn scopes_decide_and_admin_holds_every_scope() {
        let ring = KeyRing::enforced(Some("a-configured-admin-key-of-32-chars!!"));
        let ingest = generate_key().unwrap();
        ring.insert(
            hash_key(&ingest),
            Principal {
                key_id: Some(7),
                name: "mes".into(),
                scopes: vec![Scope::Ingest],
            },
        );
        assert_eq!(ring.check(None, &[Scope::Ingest]), Verdict::Unauthenticated);
        assert_eq!(
            ring.check(Some("mdk_nope"), &[Scope::Ingest]),
            Verdict::Unauthenticated
        );
        assert!(matches!(
            ring.check(Some(&ingest), &[Scope::Ingest]),
            Verdict::Allowed(Some(_))
        ));
        assert!(matches!(
            ring.check(Some(&ingest), &[Scope::Predict]),
            Verdict::Forbidden(_)
        ));
        assert!(matches!(
            ring.check(
                Some("a-configured-admin-key-of-32-chars!!"),
                &[Scope::Predict]
            ),
            Verdict::Allowed(Some(_))
        ));
        ring.revoke(7);
        assert_eq!(
            ring.check(Some(&ingest), &[Scope::Ingest]),
            Verdict::Unauthenticated
        );
        assert_eq!(
            KeyRing::open().check(None, &[Scope::Admin]),
            Verdict::Allowed(None)
        );
    }

    fn principal(id: i64) -> Principal {
        Principal {
            key_id: Some(id),
            name: format!("key {id}"),
            scopes: vec![Scope::Predict],
        }
    }

    #[test]
    fn a_stale_snapshot_neither_revives_a_revoked_key_nor_drops_a_new_one() {
        let ring = KeyRing::enforced(None);
        let (old, new) = ("mdk_old", "mdk_new");
        ring.insert(hash_key(old), principal(1));
        // Read before key 2 was created here and before key 1 was revoked here.
        let stale = vec![(hash_key(old), principal(1))];
        ring.insert(hash_key(new), principal(2));
        ring.revoke(1);
        ring.replace(1, stale);
        assert_eq!(
            ring.check(Some(old), &[Scope::Predict]),
            Verdict::Unauthenticated
        );
        assert!(matches!(
            ring.check(Some(new), &[Scope::Predict]),
            Verdict::Allowed(Some(_))
        ));
        // A revoked key cannot be inserted back either.
        ring.insert(hash_key(old), principal(1));
        assert_eq!(
            ring.check(Some(old), &[Scope::Predict]),
            Verdict::Unauthenticated
        );
        // A snapshot that knows key 2 but does not list it removes it (revoked elsewhere),
        // even when no key is active any more.
        ring.replace(2, Vec::new());
        assert_eq!(
            ring.check(Some(new), &[Scope::Predict]),
            Verdict::Unauthenticated
        );
    }
}
