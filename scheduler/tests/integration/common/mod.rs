//! A real scheduler on a loopback port with a manual clock and a temporary SQLite file, or a
//! fresh PostgreSQL database when `METAL_TEST_POSTGRES` names a server's admin URL
//! (`scripts/test` runs the scheduler's tests a second time that way).

#![allow(dead_code)] // each test binary uses a different part

use std::sync::Arc;

use metal_machines::app;
use metal_types::clock::ManualClock;
use metal_types::config::Config;
use serde_json::Value;
use time::macros::datetime;

pub struct Site {
    pub url: String,
    pub admin: String,
    pub clock: ManualClock,
    pub app: metal_api::AppState,
    pub http: reqwest::Client,
    /// The database: a PostgreSQL URL, or None for the SQLite file in the data directory.
    pub database_url: Option<String>,
    _dir: tempfile::TempDir,
}

/// The admin URL of the PostgreSQL server to test against, if any.
pub const POSTGRES_ENV: &str = "METAL_TEST_POSTGRES";

/// The database a test should use: a new, empty PostgreSQL database when `METAL_TEST_POSTGRES`
/// is set, otherwise None (the SQLite file in the data directory).
pub async fn database_url() -> Option<String> {
    let admin = std::env::var(POSTGRES_ENV).ok()?;
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
    tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
        client.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    })
    .await
    .unwrap();
    Some(url)
}

impl Site {
    pub async fn start() -> Site {
        Site::start_with(|_| {}).await
    }

    /// A site whose configuration `configure` adjusts first.
    pub async fn start_with(configure: impl FnOnce(&mut Config)) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let database = database_url().await;
        Site::start_in(dir, database, ManualClock::new(datetime!(2026-12-01 10:00:00 UTC)), configure).await
    }

    /// A second replica: its own data directory and port, this site's database (its
    /// PostgreSQL database or its SQLite file) and clock, the same admin token.
    pub async fn replica(&self) -> Site {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(self._dir.path().join(app::ADMIN_TOKEN_FILE), dir.path().join(app::ADMIN_TOKEN_FILE)).unwrap();
        let database = self.database_url.clone().unwrap_or_else(|| metal_store::Store::sqlite_url(self._dir.path()));
        Site::start_in(dir, Some(database), self.clock.clone(), |_| {}).await
    }

    async fn start_in(
        dir: tempfile::TempDir,
        database: Option<String>,
        clock: ManualClock,
        configure: impl FnOnce(&mut Config),
    ) -> Site {
        let mut config =
            Config { data_dir: dir.path().to_path_buf(), database_url: database.clone(), ..Config::default() };
        configure(&mut config);
        let app = metal_api::start(config, Arc::new(clock.clone())).await.unwrap();
        let admin = std::fs::read_to_string(dir.path().join(app::ADMIN_TOKEN_FILE)).unwrap().trim().to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let router = metal_api::router(app.clone());
        tokio::spawn(metal_api::http_server::serve(listener, router, std::future::pending()));
        Site { url, admin, clock, app, http: reqwest::Client::new(), database_url: database, _dir: dir }
    }

    /// Sends a request with `token` (None: no Authorization header); returns status and JSON.
    pub async fn call(&self, token: Option<&str>, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self.http.request(method.parse().unwrap(), format!("{}{path}", self.url));
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        if let Some(b) = body {
            request = request.json(&b);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// POSTs a CSV body as the admin.
    pub async fn admin_csv(&self, path: &str, csv: String) -> reqwest::Response {
        self.http
            .post(format!("{}{path}", self.url))
            .bearer_auth(&self.admin)
            .header("content-type", "text/csv")
            .body(csv)
            .send()
            .await
            .unwrap()
    }

    pub async fn admin(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call(Some(&self.admin.clone()), method, path, body).await
    }

    /// What the metal side tells capacity when a node binding's deploys completed: a
    /// `lease.bound` work row for each allocation (the whole contract between the sides),
    /// then capacity's pass over its queue.
    pub async fn bound_by_metal(&self, reservation: &str) {
        use metal_store::{capacity, work};
        use metal_types::clock::Clock as _;
        use metal_types::work::{CapacityNotice, LeaseNotice};
        let (id, now) = (reservation.to_owned(), self.clock.now());
        self.app
            .store
            .write(move |tx| {
                for (allocation, node) in capacity::allocations(tx, &id)? {
                    let notice = LeaseNotice { reservation: id.clone(), allocation, node, reason: None };
                    work::notify_capacity(tx, &CapacityNotice::LeaseBound(notice), now)?;
                }
                Ok::<_, metal_store::DbError>(())
            })
            .await
            .unwrap();
        metal_capacity::leases::drain_once(&self.app.store, &*self.app.clock).await.unwrap();
    }

    /// Creates `tenant`'s profile `id` (version 1, an installer deploy), which node bindings
    /// name; the platform's (`root`) profiles are public.
    pub async fn profile(&self, tenant: &str, id: &str) {
        let profile = serde_json::json!({
            "id": id, "tenantId": tenant, "public": tenant == "root", "deployMode": "installer", "adminUser": "ops",
            "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"],
            "installer": {"kind": "kickstart", "kernelUrl": "http://mirror/vmlinuz", "initrdUrl": "http://mirror/initrd",
                          "sourceUrl": "http://mirror/os"}});
        let (s, body) = self.admin("POST", "/v1/profiles", Some(profile)).await;
        assert_eq!(s, 201, "{body}");
    }

    /// Creates a tenant and a tenant-member token for it.
    pub async fn tenant(&self, id: &str) -> String {
        let (s, _) = self.admin("POST", "/v1/tenants", Some(serde_json::json!({"id": id}))).await;
        assert_eq!(s, 201);
        let (s, v) = self
            .admin(
                "POST",
                "/v1/credentials",
                Some(serde_json::json!({"role": "tenant-member", "tenantId": id, "name": "test"})),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        v["token"].as_str().unwrap().to_owned()
    }
}

/// Asserts the API's error shape and code; returns the message.
pub fn error(body: &Value, code: &str) -> String {
    assert_eq!(body["error"]["code"], code, "{body}");
    body["error"]["message"].as_str().unwrap().to_owned()
}
