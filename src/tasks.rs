//! What the background tasks (folder workers, the cache follower, retention) share: one
//! listener per process on the store's notifications, and waiting with back-off.
//!
//! With PostgreSQL a subscription is a connection of its own (`LISTEN`); the folder workers and
//! the cache follower used to hold one each. [`Notifications`] holds the only one, reconnects it
//! with back-off, and hands every notification to the tasks' [`Listener`]s.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::store::{Notification, Store, Topic};

/// How many notifications a listener may fall behind before it is told to resynchronise.
const BACKLOG: usize = 1024;

#[derive(Clone, Copy, Debug)]
enum Event {
    Change(Notification),
    /// Notifications may have been missed (the store's listener was down or reconnected).
    Lost,
}

/// The process's one listener on the store's notifications.
#[derive(Debug)]
pub struct Notifications {
    events: broadcast::Sender<Event>,
}

impl Notifications {
    /// A hub no store feeds yet ([`Notifications::start`] starts the one that listens).
    fn new() -> Self {
        Self {
            events: broadcast::channel(BACKLOG).0,
        }
    }

    /// Listens on every topic of `store` until `shutdown`, reconnecting with back-off (up to
    /// `max_backoff`) while the database is unreachable.
    pub fn start(
        store: Store,
        max_backoff: Duration,
        shutdown: CancellationToken,
    ) -> (Arc<Self>, JoinHandle<()>) {
        let hub = Arc::new(Self::new());
        let task = tokio::spawn(listen(hub.clone(), store, max_backoff, shutdown));
        (hub, task)
    }

    /// A listener for `topics`; it hears what the store announces from now on.
    pub fn subscribe(&self, topics: &[Topic]) -> Listener {
        Listener {
            events: self.events.subscribe(),
            topics: topics.to_vec(),
        }
    }

    fn send(&self, event: Event) {
        // No listener yet is no error: each resynchronises after subscribing.
        let _ = self.events.send(event);
    }
}

async fn listen(
    hub: Arc<Notifications>,
    store: Store,
    max_backoff: Duration,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let subscribed = tokio::select! {
            _ = shutdown.cancelled() => return,
            subscribed = store.subscribe(&Topic::ALL) => subscribed,
        };
        let mut subscription = match subscribed {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "notifications: database unreachable, retrying");
                if sleep_or_stop(&shutdown, &mut backoff, max_backoff).await {
                    return;
                }
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        // What was committed while nobody listened is unknown to the listeners.
        hub.send(Event::Lost);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                received = subscription.recv() => match received {
                    Ok(Some(n)) => hub.send(Event::Change(n)),
                    Ok(None) => hub.send(Event::Lost),
                    Err(e) => {
                        tracing::warn!(error = %e, "notifications: the listener failed");
                        break;
                    }
                },
            }
        }
        if sleep_or_stop(&shutdown, &mut backoff, max_backoff).await {
            return;
        }
    }
}

/// One task's view of the notifications on its topics.
#[derive(Debug)]
pub struct Listener {
    events: broadcast::Receiver<Event>,
    topics: Vec<Topic>,
}

impl Listener {
    /// The next notification on this listener's topics. `None` means some may have been missed
    /// (the store's listener reconnected, or this task fell behind): resynchronise from the
    /// store. Waits for ever once the process's listener has stopped (at shutdown).
    pub async fn recv(&mut self) -> Option<Notification> {
        loop {
            match self.events.recv().await {
                Ok(Event::Change(n)) if self.topics.contains(&n.topic) => return Some(n),
                Ok(Event::Change(_)) => {}
                Ok(Event::Lost) | Err(broadcast::error::RecvError::Lagged(_)) => return None,
                Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    }
}

/// Sleeps for `backoff` (doubling it up to `max`); `true` when shutdown came first.
pub async fn sleep_or_stop(
    shutdown: &CancellationToken,
    backoff: &mut Duration,
    max: Duration,
) -> bool {
    let pause = *backoff;
    *backoff = (*backoff * 2).min(max);
    tokio::select! {
        _ = shutdown.cancelled() => true,
        _ = tokio::time::sleep(pause) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(topic: Topic, model_id: Option<i64>) -> Event {
        Event::Change(Notification { topic, model_id })
    }

    #[tokio::test]
    async fn a_listener_hears_its_topics_and_is_told_what_it_missed() {
        let hub = Notifications::new();
        let mut batches = hub.subscribe(&[Topic::Batches]);
        let mut models = hub.subscribe(&[Topic::Models, Topic::Keys]);
        hub.send(change(Topic::Models, Some(7)));
        hub.send(change(Topic::Batches, Some(3)));
        hub.send(Event::Lost);
        hub.send(change(Topic::Keys, None));

        let heard = batches.recv().await.expect("a notification");
        assert_eq!((heard.topic, heard.model_id), (Topic::Batches, Some(3)));
        assert!(batches.recv().await.is_none(), "told to resynchronise");
        let heard = models.recv().await.expect("a notification");
        assert_eq!((heard.topic, heard.model_id), (Topic::Models, Some(7)));
        assert!(models.recv().await.is_none(), "told to resynchronise");
        assert_eq!(models.recv().await.expect("keys").topic, Topic::Keys);
    }

    #[tokio::test]
    async fn a_listener_that_falls_behind_resynchronises() {
        let hub = Notifications::new();
        let mut slow = hub.subscribe(&[Topic::Batches]);
        for id in 0..=BACKLOG as i64 {
            hub.send(change(Topic::Batches, Some(id)));
        }
        assert!(slow.recv().await.is_none(), "lagged: resynchronise");
        // Then it hears what is still in the backlog.
        assert_eq!(slow.recv().await.expect("kept").model_id, Some(1));
    }

    #[tokio::test]
    async fn a_listener_subscribed_later_hears_only_what_follows() {
        let hub = Notifications::new();
        hub.send(change(Topic::Batches, Some(1)));
        let mut late = hub.subscribe(&[Topic::Batches]);
        hub.send(change(Topic::Batches, Some(2)));
        assert_eq!(late.recv().await.expect("the later one").model_id, Some(2));
    }
}
