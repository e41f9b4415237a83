//! Reloading the configuration when its files change, as the reference's file provider does
//! (goruntime's refreshers), without losing a bucket: [`Watcher`].
//!
//! The watcher polls (every [`Watcher::interval`], 1 s by default): portable, with no
//! dependency, and it sees what inotify misses (a network or overlay file system, a
//! ConfigMap's atomic `..data` swap). What it compares, as `RUNTIME_WATCH_ROOT` says:
//!
//! - `true` (the reference's default, its `SymlinkRefresher`): where `RUNTIME_ROOT` resolves
//!   to. Point the `RUNTIME_ROOT` symlink at another directory to reload; files edited in
//!   place are not reloaded (nor are they by the reference).
//! - `false` (its `DirectoryRefresher`, watching writes, creates, removes and chmods): every
//!   file of `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`, by name, length,
//!   modification time, permissions and a hash of its content, symlinks followed (so a
//!   Kubernetes ConfigMap's swap of `..data` is seen). What Kubernetes needs.
//!
//! On a change the whole directory is loaded again ([`Config::load_dir`]); when it loads,
//! [`Service::set_config`] puts it in force for the next requests. The buckets are in Redis,
//! keyed by each rule's bucket (its domain and descriptor, or its `shared` name), not by the
//! configuration: a rule that stays keeps its bucket and what was taken from it, even with a
//! new limit. When it fails, the configuration in force stays, every error is logged (`ERROR`,
//! `file:line:column: path: message` each) and `ratelimit_service_config_load_error` counted;
//! the same files are not retried until they change again.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::config::{Config, ConfigErrors, LoadOptions};
use crate::service::Service;
use crate::settings::Settings;

/// Watches the configuration's files and reloads them into a [`Service`].
#[derive(Debug, Clone)]
pub struct Watcher {
    dir: PathBuf,
    root: Option<PathBuf>,
    options: LoadOptions,
    interval: Duration,
}

/// What a poll saw: where the paths resolve to and each file's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    resolved: Option<PathBuf>,
    files: Vec<(String, u64, Option<SystemTime>, bool, u64)>,
}

impl Watcher {
    /// Watches the files of `dir` (`RUNTIME_WATCH_ROOT=false`), read with `options`.
    pub fn new(dir: impl Into<PathBuf>, options: LoadOptions) -> Watcher {
        Watcher {
            dir: dir.into(),
            root: None,
            options,
            interval: Duration::from_secs(1),
        }
    }

    /// As the settings say: the directory, the options, and `RUNTIME_WATCH_ROOT`.
    pub fn from_settings(settings: &Settings) -> Watcher {
        let watcher = Watcher::new(settings.config_dir(), settings.load_options());
        if settings.runtime_watch_root {
            watcher.watch_root(settings.runtime_root.clone())
        } else {
            watcher
        }
    }

    /// Reloads when `root` (a symlink) resolves elsewhere, not when files change in place
    /// (`RUNTIME_WATCH_ROOT=true`).
    #[must_use]
    pub fn watch_root(mut self, root: impl Into<PathBuf>) -> Watcher {
        self.root = Some(root.into());
        self
    }

    /// How often to look (default 1 s).
    #[must_use]
    pub fn interval(mut self, interval: Duration) -> Watcher {
        self.interval = interval;
        self
    }

    /// The directory the configuration is read from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Loads the directory now: on success puts it in force in `service`; on failure keeps
    /// the configuration in force and logs every error. Counted either way in the service's
    /// [`Stats`](crate::stats::Stats).
    ///
    /// # Errors
    /// Every error of the directory's files.
    pub fn load_into(&self, service: &Service) -> Result<(), ConfigErrors> {
        match Config::load_dir(&self.dir, &self.options) {
            Ok(config) => {
                service.set_config(config);
                service.counters().record_load(true);
                tracing::info!(dir = %self.dir.display(), "configuration loaded");
                Ok(())
            }
            Err(errors) => {
                for error in errors.errors() {
                    tracing::error!(
                        "configuration not reloaded (the previous one stays in force): {error}"
                    );
                }
                service.counters().record_load(false);
                Err(errors)
            }
        }
    }

    /// The poll loop: until `shutdown` completes, reloads into `service` on each change. The
    /// files are looked at once here, before the loop is returned (a blocking read of the
    /// directory): the configuration in force is taken to be those files (load it first, with
    /// [`load_into`](Watcher::load_into) or at start-up), and any change after this call is
    /// seen.
    pub fn run(
        self,
        service: Arc<Service>,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> impl std::future::Future<Output = ()> {
        let seen = Some(self.fingerprint());
        self.poll(service, shutdown, seen)
    }

    async fn poll(
        self,
        service: Arc<Service>,
        shutdown: impl std::future::Future<Output = ()>,
        mut seen: Option<Fingerprint>,
    ) {
        let this = Arc::new(self);
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(this.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                _ = tick.tick() => {}
            }
            let this = Arc::clone(&this);
            let service = Arc::clone(&service);
            let previous = seen.clone();
            let polled = tokio::task::spawn_blocking(move || {
                let now = this.fingerprint();
                if previous.as_ref() != Some(&now) {
                    let _ = this.load_into(&service);
                }
                now
            })
            .await;
            if let Ok(now) = polled {
                seen = Some(now);
            }
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        if let Some(root) = &self.root {
            return Fingerprint {
                resolved: std::fs::canonicalize(root).ok(),
                files: Vec::new(),
            };
        }
        let resolved = std::fs::canonicalize(&self.dir).ok();
        let mut files = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for entry in entries.flatten() {
                let path = entry.path();
                // Symlinks followed: a ConfigMap's files point into `..data`.
                let Ok(meta) = std::fs::metadata(&path) else {
                    continue;
                };
                if meta.is_dir() {
                    continue;
                }
                let mut hasher = DefaultHasher::new();
                if meta.len() <= crate::config::MAX_FILE_BYTES
                    && let Ok(bytes) = std::fs::read(&path)
                {
                    bytes.hash(&mut hasher);
                }
                files.push((
                    entry.file_name().to_string_lossy().into_owned(),
                    meta.len(),
                    meta.modified().ok(),
                    meta.permissions().readonly(),
                    hasher.finish(),
                ));
            }
        }
        files.sort();
        Fingerprint { resolved, files }
    }
}
