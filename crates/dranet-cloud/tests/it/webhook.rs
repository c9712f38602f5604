//! The webhook provider against a fake webhook speaking upstream's protocol (as upstream's
//! `tests/webhook.py`), over TCP and a unix socket: capabilities, attributes and device config
//! per device, profiles and their release; bad answers named, slow and oversized ones bounded.

use std::time::Duration;

use crate::support::quick_retry;
use dranet_cloud::RetryPolicy;
use dranet_cloud::fake::{FakeServer, Reply, clouds};
use dranet_cloud::tls::Tls;
use dranet_cloud::webhook::{Capabilities, Webhook};
use dranet_core::{
    AttributeValue, CloudProvider, DeviceIdentifiers, NetworkConfig, ProfileError, ProfileProvider,
    ProfileRequest, RuntimeHook,
};
use std::path::{Path, PathBuf};
use std::process::Command;

fn dev(name: &str) -> DeviceIdentifiers {
    DeviceIdentifiers {
        name: Some(name.into()),
        mac: Some("0a:58:0a:f4:00:07".into()),
        pci_address: Some("0000:3b:00.0".parse().unwrap()),
        ipv6_gateway: None,
    }
}

fn profile_request(profile: &str) -> ProfileRequest {
    ProfileRequest {
        device: dev("drt0"),
        claim_uid: "3f1a2b4c-uid".into(),
        config: NetworkConfig {
            profile: profile.into(),
            ..NetworkConfig::default()
        },
    }
}

const TIMEOUT: Duration = Duration::from_millis(500);

async fn connect(url: &str) -> Webhook {
    Webhook::connect(url, None, TIMEOUT, quick_retry())
        .await
        .unwrap()
}

#[tokio::test]
async fn upstreams_protocol_over_tcp_and_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    for unix in [false, true] {
        let (script, released) =
            clouds::webhook("drt0", 1450, "python-profile", "10.200.200.200/24");
        let fake = if unix {
            FakeServer::start_unix(&dir.path().join("webhook.sock"), script).await
        } else {
            FakeServer::start(script).await
        }
        .unwrap();
        let w = connect(&fake.endpoint).await;
        assert_eq!(
            w.capabilities(),
            Capabilities {
                cloud_provider: true,
                profile_provider: true,
                runtime_hook: false,
            }
        );
        let devices = [dev("drt0"), dev("eth9")];
        w.refresh(&devices).await;
        let a = w.device_attributes(&devices[0]);
        assert_eq!(
            a["webhook_attr"],
            AttributeValue::String("python".into()),
            "the driver's own domain, unqualified as discovery's attributes"
        );
        assert_eq!(
            w.device_config(&devices[0]).map(|c| c.interface.mtu),
            Some(Some(1450))
        );
        assert!(w.device_attributes(&devices[1]).is_empty());
        assert_eq!(
            w.device_config(&devices[1]),
            None,
            "an empty config is none"
        );

        let c = w
            .get_profile_config(&profile_request("python-profile"))
            .await
            .unwrap();
        assert_eq!(c.interface.addresses, ["10.200.200.200/24"]);
        w.release_profile_config(&profile_request("python-profile"))
            .await
            .unwrap();
        assert_eq!(
            *released.lock().unwrap(),
            [("3f1a2b4c-uid".to_string(), "drt0".to_string())]
        );

        // The wire format: upstream's field names, `name` always there.
        let seen = fake.seen();
        let attrs = seen
            .iter()
            .find(|r| r.path() == "/GetDeviceAttributes" && r.json()["name"] == "drt0")
            .unwrap();
        assert_eq!(attrs.method, "POST");
        assert_eq!(attrs.header("content-type"), Some("application/json"));
        assert_eq!(
            attrs.json(),
            serde_json::json!({"name": "drt0", "mac_address": "0a:58:0a:f4:00:07", "pci_address": "0000:3b:00.0"})
        );
        let get = seen
            .iter()
            .find(|r| r.path() == "/GetProfileConfig")
            .unwrap();
        assert_eq!(
            get.json(),
            serde_json::json!({
                "device": {"name": "drt0", "mac_address": "0a:58:0a:f4:00:07", "pci_address": "0000:3b:00.0"},
                "claim_uid": "3f1a2b4c-uid",
                "config": {"profile": "python-profile", "interface": {}}
            })
        );
    }
}

#[tokio::test]
async fn a_device_the_webhook_fails_for_keeps_its_last_answer() {
    let (ok, _) = clouds::webhook("drt0", 1450, "p", "10.0.0.1/24");
    let fake = FakeServer::start(move |r, n| {
        // Healthy for the first refresh (health + 2 POSTs), then failing.
        if n < 3 {
            ok(r, n)
        } else {
            Reply::Json(500, "{}".into())
        }
    })
    .await
    .unwrap();
    let w = connect(&fake.endpoint).await;
    let d = [dev("drt0")];
    w.refresh(&d).await;
    w.refresh(&d).await;
    assert_eq!(w.device_attributes(&d[0]).len(), 1);
    assert!(w.device_config(&d[0]).is_some());
    // A device gone from the node is forgotten.
    w.refresh(&[]).await;
    assert!(w.device_attributes(&d[0]).is_empty());
}

#[tokio::test]
async fn a_refresh_cut_short_keeps_the_answers_it_got_and_the_last_of_the_others() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    // The first refresh answers every device `v1`; then `fast` answers `v2` and `slow` never.
    let second = Arc::new(AtomicBool::new(false));
    let s = second.clone();
    let fake = FakeServer::start(move |r, _| {
        let later = s.load(Ordering::SeqCst);
        match r.path() {
            "/health" => Reply::Json(200, r#"{"cloudProvider": true}"#.into()),
            _ if later && r.json()["name"] == "slow" => Reply::Hang,
            "/GetDeviceAttributes" => {
                let v = if later { "v2" } else { "v1" };
                Reply::Json(
                    200,
                    format!(r#"{{"dra.net/webhook_attr": {{"string": "{v}"}}}}"#),
                )
            }
            _ => Reply::Json(200, "{}".into()),
        }
    })
    .await
    .unwrap();
    // Each request may take a minute: only the caller's bound ends the refresh.
    let w = Webhook::connect(&fake.endpoint, None, Duration::from_secs(60), quick_retry())
        .await
        .unwrap();
    let d = [dev("fast"), dev("slow")];
    w.refresh(&d).await;
    second.store(true, Ordering::SeqCst);
    let cut = tokio::time::timeout(Duration::from_secs(2), w.refresh(&d)).await;
    assert!(
        cut.is_err(),
        "the refresh waits for the device that never answers"
    );
    let attr = |i: usize| w.device_attributes(&d[i])["webhook_attr"].clone();
    assert_eq!(
        attr(0),
        AttributeValue::String("v2".into()),
        "kept as it came"
    );
    assert_eq!(
        attr(1),
        AttributeValue::String("v1".into()),
        "its last answer"
    );
}

#[tokio::test]
async fn answers_that_are_not_the_protocol_are_errors_that_name_the_problem() {
    let fake = FakeServer::start(|r, _| match r.path() {
        "/health" => Reply::Json(
            200,
            r#"{"cloudProvider": true, "profileProvider": true}"#.into(),
        ),
        "/GetProfileConfig" if r.json()["config"]["profile"] == "typo" => {
            Reply::Json(200, r#"{"interface": {"mtuu": 1500}}"#.into())
        }
        "/GetProfileConfig" => Reply::Json(200, r#"{"interface": {"mtu": 10}}"#.into()),
        "/ReleaseProfileConfig" => Reply::Json(404, "no such lease".into()),
        _ => Reply::Json(200, r#"{"dra.net/x": {"float": 1.5}}"#.into()),
    })
    .await
    .unwrap();
    let w = connect(&fake.endpoint).await;
    let e = w
        .get_profile_config(&profile_request("typo"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("unknown field `mtuu`"), "{e}");
    let e = w
        .get_profile_config(&profile_request("small"))
        .await
        .unwrap_err();
    assert!(matches!(e, ProfileError::Invalid { .. }), "{e}");
    assert!(e.to_string().contains("interface.mtu"), "{e}");
    let e = w
        .release_profile_config(&profile_request("p"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("HTTP 404: no such lease"), "{e}");
    let e = w.get_device_attributes(&dev("drt0")).await.unwrap_err();
    assert!(e.to_string().contains("unknown variant `float`"), "{e}");
    // Health that is not the capabilities document.
    let bad = FakeServer::start(|_, _| Reply::Json(200, "OK".into()))
        .await
        .unwrap();
    let e = Webhook::connect(&bad.endpoint, None, TIMEOUT, quick_retry())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("webhook /health answer"), "{e}");
}

#[tokio::test]
async fn runtime_hooks_are_asked_only_of_a_webhook_that_serves_them() {
    let fake = FakeServer::start(|r, _| {
        let body = r.json();
        match r.path() {
            "/health" => Reply::Json(
                200,
                r#"{"profileProvider": true, "runtimeHook": true}"#.into(),
            ),
            "/GetRuntimeHook" => match body["config"]["profile"].as_str() {
                Some("hooked") => Reply::Json(
                    200,
                    format!(
                        r#"{{"path": "/opt/fabric/bin/port-up", "args": ["--claim", {}],
                            "timeoutSeconds": 5, "data": {{"vlan": 7}}}}"#,
                        body["claim_uid"]
                    ),
                ),
                Some("none") => Reply::Json(200, "null".into()),
                Some("empty") => Reply::Json(200, "{}".into()),
                Some("relative") => Reply::Json(200, r#"{"path": "port-up"}"#.into()),
                Some("long") => Reply::Json(200, r#"{"path": "/p", "timeoutSeconds": 300}"#.into()),
                _ => Reply::Json(200, r#"{"path": "/p", "env": ["A=1"]}"#.into()),
            },
            _ => Reply::Json(404, "{}".into()),
        }
    })
    .await
    .unwrap();
    let w = connect(&fake.endpoint).await;
    assert!(w.serves_runtime_hooks());
    let hook = w
        .get_runtime_hook(&profile_request("hooked"))
        .await
        .unwrap()
        .expect("a hook");
    assert_eq!(
        hook,
        RuntimeHook {
            path: "/opt/fabric/bin/port-up".into(),
            args: vec!["--claim".into(), "3f1a2b4c-uid".into()],
            timeout_seconds: 5,
            data: serde_json::json!({"vlan": 7}),
        }
    );
    let asked = fake.seen();
    let body: serde_json::Value = serde_json::from_slice(&asked[1].body).unwrap();
    assert_eq!(asked[1].path(), "/GetRuntimeHook");
    assert_eq!(body["claim_uid"], "3f1a2b4c-uid");
    assert_eq!(body["device"]["name"], "drt0");
    for none in ["none", "empty"] {
        assert_eq!(
            w.get_runtime_hook(&profile_request(none)).await.unwrap(),
            None
        );
    }
    for (bad, says) in [
        ("relative", "path \"port-up\" is not absolute"),
        ("long", "timeoutSeconds 300 is more than 30"),
        ("unknown", "unknown field `env`"),
    ] {
        let e = w
            .get_runtime_hook(&profile_request(bad))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }

    // Without the capability the webhook is not asked.
    let (script, _) = clouds::webhook("drt0", 1450, "python-profile", "10.200.200.200/24");
    let plain = FakeServer::start(script).await.unwrap();
    let w = connect(&plain.endpoint).await;
    assert!(!w.serves_runtime_hooks());
    assert_eq!(
        w.get_runtime_hook(&profile_request("python-profile"))
            .await
            .unwrap(),
        None
    );
    assert!(
        plain.seen().iter().all(|r| r.path() != "/GetRuntimeHook"),
        "not asked"
    );
}

#[tokio::test]
async fn a_webhook_without_the_cloud_capability_is_not_asked_about_devices() {
    let fake = FakeServer::start(|_, _| {
        Reply::Json(
            200,
            r#"{"cloudProvider": false, "profileProvider": true}"#.into(),
        )
    })
    .await
    .unwrap();
    let w = connect(&fake.endpoint).await;
    w.refresh(&[dev("drt0")]).await;
    assert_eq!(fake.seen().len(), 1, "health only");
}

#[tokio::test]
async fn slow_and_oversized_answers_are_bounded() {
    let fake = FakeServer::start(|r, _| match r.path() {
        "/health" => Reply::Json(
            200,
            r#"{"cloudProvider": true, "profileProvider": true}"#.into(),
        ),
        "/GetProfileConfig" => Reply::Hang,
        "/ReleaseProfileConfig" => Reply::Endless,
        _ => Reply::Trickle("{}".repeat(50)),
    })
    .await
    .unwrap();
    let w = connect(&fake.endpoint).await;
    let e = w
        .get_profile_config(&profile_request("p"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no answer within 500ms"), "{e}");
    let e = w
        .release_profile_config(&profile_request("p"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("larger than 1048576 bytes"), "{e}");
    let e = w.get_device_attributes(&dev("drt0")).await.unwrap_err();
    assert!(e.to_string().contains("no answer within"), "{e}");
}

#[tokio::test]
async fn health_is_retried_while_the_webhook_starts() {
    let fake = FakeServer::start(|_, n| {
        if n < 2 {
            Reply::Json(503, "starting".into())
        } else {
            Reply::Json(200, r#"{"cloudProvider": true}"#.into())
        }
    })
    .await
    .unwrap();
    let w = connect(&fake.endpoint).await;
    assert!(w.capabilities().cloud_provider && !w.capabilities().profile_provider);
    // A webhook that never comes up: an error within the budget.
    let policy = RetryPolicy {
        budget: Duration::from_millis(300),
        ..quick_retry()
    };
    let down = FakeServer::start(|_, _| Reply::Json(503, "down".into()))
        .await
        .unwrap();
    let e = Webhook::connect(&down.endpoint, None, TIMEOUT, policy)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("HTTP 503: down"), "{e}");
}

/// A CA and a server certificate for `localhost` signed by it, made by openssl in `dir`:
/// (CA PEM, server chain PEM, server key PEM). `None` without openssl.
fn pki(dir: &Path, tag: &str) -> Option<(PathBuf, Vec<u8>, Vec<u8>)> {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output();
        match out {
            Ok(o) if o.status.success() => Some(()),
            Ok(o) => panic!("openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr)),
            Err(_) => None,
        }
    };
    let (ca_key, ca) = (format!("{tag}-ca.key"), format!("{tag}-ca.pem"));
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &ca_key,
        "-out",
        &ca,
        "-days",
        "1",
        "-subj",
        &format!("/CN={tag} test CA"),
    ])?;
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ])?;
    std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost\n").ok()?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "1",
        "-extfile",
        "san.ext",
    ])?;
    Some((
        dir.join(ca),
        std::fs::read(dir.join("server.pem")).ok()?,
        std::fs::read(dir.join("server.key")).ok()?,
    ))
}

/// An https webhook answers when its certificate chains to the CA given, and is refused,
/// naming the certificate, when it does not: an off-node webhook cannot be spoofed.
#[tokio::test]
async fn an_https_webhook_is_trusted_only_with_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    let Some((ca, chain, key)) = pki(dir.path(), "ours") else {
        eprintln!("SKIP an_https_webhook_is_trusted_only_with_its_ca: needs openssl");
        return;
    };
    let (script, _) = clouds::webhook("pci-0000-01-00-0", 9000, "p", "10.0.0.5/24");
    let server = FakeServer::start_tls(&chain, &key, script).await.unwrap();
    let quick = RetryPolicy {
        budget: Duration::from_millis(200),
        ..RetryPolicy::default()
    };
    let tls = Tls::from_ca_file(&ca).unwrap();
    let hook = Webhook::connect(&server.endpoint, Some(tls), Duration::from_secs(5), quick)
        .await
        .unwrap();
    assert!(hook.capabilities().cloud_provider);

    let other = tempfile::tempdir().unwrap();
    let (other_ca, _, _) = pki(other.path(), "theirs").unwrap();
    let theirs = Tls::from_ca_file(&other_ca).unwrap();
    let e = Webhook::connect(
        &server.endpoint,
        Some(theirs),
        Duration::from_secs(5),
        quick,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("certificate"), "{e}");

    let e = Webhook::connect(&server.endpoint, None, Duration::from_secs(5), quick)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("--webhook-ca-file"), "{e}");
}

/// Issue 47, held: a webhook answer of 2 MiB is refused at the 1 MiB limit (not read whole, not
/// parsed), for attributes, device config and profiles alike.
#[tokio::test]
async fn held_47_a_webhook_answer_of_2_mib_is_refused_at_the_limit() {
    let big = format!(
        "{{\"dra.net/x\": {{\"string\": \"{}\"}}}}",
        "a".repeat(2 << 20)
    );
    let fake = FakeServer::start(move |r, _| match r.path() {
        "/health" => Reply::Json(
            200,
            r#"{"cloudProvider": true, "profileProvider": true}"#.into(),
        ),
        _ => Reply::Json(200, big.clone()),
    })
    .await
    .unwrap();
    let w = connect(&fake.endpoint).await;
    let e = w.get_device_attributes(&dev("drt0")).await.unwrap_err();
    assert!(e.to_string().contains("larger than 1048576 bytes"), "{e}");
    let e = w.get_device_config(&dev("drt0")).await.unwrap_err();
    assert!(e.to_string().contains("larger than 1048576 bytes"), "{e}");
    let e = w
        .get_profile_config(&profile_request("p"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("larger than 1048576 bytes"), "{e}");
    // A refresh keeps no attribute of it.
    w.refresh(&[dev("drt0")]).await;
    assert!(w.device_attributes(&dev("drt0")).is_empty());
}

/// Issue 47, held: a webhook redirecting to the metadata service (169.254.169.254, where a
/// node's cloud credentials live) or anywhere else is not followed: the redirect is an error
/// and the target sees no request.
#[tokio::test]
async fn held_47_a_webhook_redirect_is_not_followed() {
    let target = FakeServer::start(|_, _| Reply::Json(200, r#"{"dra.net/x": {"int": 1}}"#.into()))
        .await
        .unwrap();
    let elsewhere = format!("{}/latest/meta-data/", target.endpoint);
    for location in [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/".to_string(),
        elsewhere,
    ] {
        let fake = FakeServer::start(move |r, _| match r.path() {
            "/health" => Reply::Json(
                200,
                r#"{"cloudProvider": true, "profileProvider": true}"#.into(),
            ),
            _ => Reply::With(
                302,
                vec![("Location".into(), location.clone())],
                String::new(),
            ),
        })
        .await
        .unwrap();
        let w = connect(&fake.endpoint).await;
        let t = std::time::Instant::now();
        let e = w.get_device_attributes(&dev("drt0")).await.unwrap_err();
        assert!(e.to_string().contains("HTTP 302"), "{e}");
        assert!(
            t.elapsed() < TIMEOUT,
            "answered at once, no connection attempted"
        );
        let e = w
            .get_profile_config(&profile_request("p"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("HTTP 302"), "{e}");
    }
    assert!(target.seen().is_empty(), "the redirect's target was asked");
}

/// Issue 47, held: a webhook answer of 100,000 nested arrays is an error naming the answer, not
/// a stack overflow of the daemon.
#[tokio::test]
async fn held_47_a_webhook_answer_100k_deep_is_an_error_not_a_crash() {
    let deep = format!(
        "{{\"dra.net/x\": {}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let fake = FakeServer::start(move |r, _| match r.path() {
        "/health" => Reply::Json(
            200,
            r#"{"cloudProvider": true, "profileProvider": true}"#.into(),
        ),
        _ => Reply::Json(200, deep.clone()),
    })
    .await
    .unwrap();
    let w = connect(&fake.endpoint).await;
    let e = w.get_device_attributes(&dev("drt0")).await.unwrap_err();
    assert!(
        e.to_string().contains("webhook GetDeviceAttributes answer"),
        "{e}"
    );
    let e = w.get_device_config(&dev("drt0")).await.unwrap_err();
    assert!(e.to_string().contains("GetDeviceConfig"), "{e}");
    let e = w
        .get_profile_config(&profile_request("p"))
        .await
        .unwrap_err();
    assert!(!e.to_string().is_empty());
    // The health document too.
    let bad = FakeServer::start(|_, _| {
        Reply::Json(
            200,
            format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
        )
    })
    .await
    .unwrap();
    let e = Webhook::connect(&bad.endpoint, None, TIMEOUT, quick_retry())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("webhook /health answer"), "{e}");
}
