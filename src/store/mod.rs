//! Persistence: models, the queue of batches, immutable versions and API keys, behind one
//! trait ([`Backend`]) with two implementations.
//!
//! * [`postgres`]: PostgreSQL, for production and for several replicas against one database.
//!   Notifications travel through `LISTEN/NOTIFY`, so every replica hears every change.
//! * [`sqlite`]: an embedded SQLite file, the default when no PostgreSQL URL is configured.
//!   One process owns the file (a second one is refused at start); notifications stay inside
//!   that process.
//!
//! Both keep the same promises, checked by one conformance suite (`tests/store.rs`) and the API
//! tests: a batch is on disk when ingestion returns; a model's batches are folded exactly once,
//! in arrival order; versions are immutable; a notification is sent only once the change it
//! announces is committed.
//!
//! [`Store`] is the cheap, cloneable handle the rest of the service holds.

mod backend;
mod columns;
pub mod copy;
mod dump;
mod error;
mod handle;
mod location;
mod lock;
pub mod postgres;
mod reads;
mod records;
mod settings;
mod sql;
pub mod sqlite;
mod status;

pub use settings::{DEFAULT_FULL_STATE_EVERY, DatabaseSettings};

pub use status::{BatchStatus, VersionOrigin};

pub use backend::{Backend, Notification, Subscription, Topic, lasting_migration_error};
use backend::{check_migrations, check_schema};
pub use error::StoreError;
pub use handle::Store;
pub use location::Location;
pub use lock::{BatchSurprise, ModelLock, ModelTransaction};
pub use records::*;
use records::{StoredBatch, not_held};
use sql::{BATCH_COLUMNS, KEY_COLUMNS};
