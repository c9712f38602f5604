//! Every cloud's read against a slow or hostile metadata service: silence, a body that trickles,
//! a body that never ends, a document over the size limit, bytes that are not HTTP, a document
//! that is not JSON. Each ends within the retry budget with a warning naming the failure, no
//! attributes, and no crash; a body over the limit is refused at the limit and not retried.

use std::time::Duration;

use crate::support::{detector, sysfs};
use dranet_cloud::RetryPolicy;
use dranet_cloud::detect::{Hint, Provider};
use dranet_cloud::dmi::Cloud;
use dranet_cloud::fake::{FakeServer, Reply};

/// What the hostile service does, and what the warning must say.
fn cases() -> Vec<(&'static str, Reply, &'static str)> {
    vec![
        ("silent", Reply::Hang, "did not answer within"),
        (
            "trickling",
            Reply::Trickle("x".repeat(100)),
            "did not answer within",
        ),
        ("endless", Reply::Endless, "larger than 1048576 bytes"),
        (
            "huge",
            Reply::Json(200, format!("{{\"x\": \"{}\"}}", "a".repeat(4 << 20))),
            "larger than 1048576 bytes",
        ),
        ("garbage", Reply::Garbage, "did not answer within"),
        ("busy", Reply::Json(503, "{}".into()), "HTTP 503"),
    ]
}

fn found(p: &Option<Provider>) -> bool {
    match p {
        // Alibaba keeps its sysfs eRDMA list when IMDS fails (as upstream); no instance type.
        Some(Provider::Alibaba(a)) => !a.instance_type.is_empty(),
        Some(_) => true,
        None => false,
    }
}

/// One cloud against every hostile service, in turn.
async fn against(cloud: Cloud, sys: &std::path::Path) {
    for (name, reply, needle) in cases() {
        let r = reply.clone();
        let fake = FakeServer::start(move |_, _| r.clone()).await.unwrap();
        let mut det = detector(&fake.endpoint, sys, Hint::Cloud(cloud));
        det.retry = RetryPolicy {
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(50),
            budget: Duration::from_millis(700),
        };
        let d = det.detect().await;
        assert!(!found(&d.provider), "{cloud} {name}: {:?}", d.provider);
        assert_eq!(d.warnings.len(), 1, "{cloud} {name}: {:?}", d.warnings);
        assert!(
            d.warnings[0].contains(needle),
            "{cloud} {name}: {:?}",
            d.warnings
        );
        let seen = fake.seen().len();
        if needle.starts_with("larger") {
            assert_eq!(
                seen, 1,
                "{cloud} {name}: an oversized answer is not retried"
            );
        } else {
            assert!(
                seen >= 2,
                "{cloud} {name}: transient errors are retried ({seen})"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_services_end_in_a_warning_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path(), None, |_| Ok(()));
    futures::future::join_all(Cloud::ALL.map(|c| against(c, &sys))).await;
}

#[tokio::test]
async fn documents_that_are_not_what_the_service_sends_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path(), None, |_| Ok(()));
    for cloud in [Cloud::Azure, Cloud::Gce, Cloud::Aws, Cloud::Oke] {
        let fake = FakeServer::start(|r, _| match r.method.as_str() {
            "PUT" => Reply::Json(200, "token".into()),
            _ => Reply::Json(200, "[1, 2".into()),
        })
        .await
        .unwrap();
        let d = detector(&fake.endpoint, &sys, Hint::Cloud(cloud))
            .detect()
            .await;
        assert!(d.provider.is_none(), "{cloud}");
        let w = &d.warnings[0];
        assert!(
            w.contains("document") && w.contains(&format!("no {cloud}.dra.net attributes")),
            "{cloud}: {w}"
        );
    }
}
