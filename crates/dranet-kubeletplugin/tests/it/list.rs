//! `KubeClient::for_each_slice`: a cluster's ResourceSlices listed page by page within limits
//! (issue 47 L6: `dranet check --from-cluster` kept every slice of every page as JSON, with no
//! cap).

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use crate::common::*;
use dranet_kubeletplugin::Error;
use dranet_kubeletplugin::api::{LIST_PAGE, ListLimits};
use dranet_kubeletplugin::fake::FakeApiServer;
use k8s_openapi::api::resource::v1::{Device, DeviceAttribute};

/// A slice of 128 devices with 32 attributes each whose strings are 64 characters: about the
/// largest the API server takes.
fn maximal(name: &str) -> k8s_openapi::api::resource::v1::ResourceSlice {
    let mut s = slice(name, "big.example.com", "node-big");
    let attributes: BTreeMap<String, DeviceAttribute> = (0..32)
        .map(|a| {
            (
                format!("attribute-with-a-long-name-{a:02}"),
                DeviceAttribute {
                    string: Some(format!("{a:0>64}")),
                    ..Default::default()
                },
            )
        })
        .collect();
    s.spec.devices = Some(
        (0..128)
            .map(|d| Device {
                name: format!("device-{d}"),
                attributes: Some(attributes.clone()),
                ..Default::default()
            })
            .collect(),
    );
    s
}

const WIDE_OPEN: ListLimits = ListLimits {
    page_bytes: ListLimits::PAGE_BYTES,
    total_bytes: u64::MAX,
};

#[tokio::test]
async fn cluster_slices_are_listed_in_pages_and_stop_at_the_total_cap() {
    let api = FakeApiServer::start().await.unwrap();
    let n = 2 * LIST_PAGE as usize + 7;
    for i in 0..n {
        api.put_slice_externally(slice(&format!("s-{i:05}"), "d.example.com", "n1"));
    }
    let client = api.client().unwrap();

    // Every slice once, in three pages, each item typed as the API server serves it.
    let mut names = Vec::new();
    let stats = client
        .for_each_slice(WIDE_OPEN, |v| {
            assert_eq!(v["apiVersion"], "resource.k8s.io/v1");
            assert_eq!(v["kind"], "ResourceSlice");
            names.push(v["metadata"]["name"].as_str().unwrap().to_string());
            ControlFlow::Continue(())
        })
        .await
        .unwrap();
    assert_eq!((stats.pages, stats.items), (3, n));
    assert_eq!(api.slice_list_requests(), 3);
    let want: Vec<String> = (0..n).map(|i| format!("s-{i:05}")).collect();
    assert_eq!(names, want);

    // A total under what the pages hold: the cap's error, naming the list and the limit.
    let total = stats.bytes / 2;
    let e = client
        .for_each_slice(
            ListLimits {
                total_bytes: total,
                ..WIDE_OPEN
            },
            |_| ControlFlow::Continue(()),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::TooLarge { what: "the list", limit, .. } if *limit == total),
        "{e}"
    );
    assert!(
        e.to_string().contains(&format!("more than {total} bytes")),
        "{e}"
    );

    // The caller stops it: no further page is asked for.
    let before = api.slice_list_requests();
    let mut seen = 0;
    client
        .for_each_slice(WIDE_OPEN, |_| {
            seen += 1;
            if seen == 3 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .await
        .unwrap();
    assert_eq!((seen, api.slice_list_requests() - before), (3, 1));
}

#[tokio::test]
async fn a_page_over_its_bound_is_asked_again_smaller_and_one_object_over_it_is_refused() {
    let api = FakeApiServer::start().await.unwrap();
    for i in 0..20 {
        api.put_slice_externally(maximal(&format!("big-{i:02}")));
    }
    let client = api.client().unwrap();
    let mut one = 0;
    let stats = client
        .for_each_slice(WIDE_OPEN, |v| {
            one = one.max(serde_json::to_vec(&v).unwrap().len());
            ControlFlow::Continue(())
        })
        .await
        .unwrap();
    assert_eq!((stats.pages, stats.items), (1, 20));
    assert!(one > 400_000, "a maximal slice is hundreds of kB: {one}");

    // Pages bounded to about 4 slices: asked again with 500 / 8 = 62, then 7 objects and
    // finally 1 per page, every slice still read once.
    let page_bytes = one * 4;
    let mut names = Vec::new();
    let stats = client
        .for_each_slice(
            ListLimits {
                page_bytes,
                ..WIDE_OPEN
            },
            |v| {
                names.push(v["metadata"]["name"].as_str().unwrap().to_string());
                ControlFlow::Continue(())
            },
        )
        .await
        .unwrap();
    assert_eq!(stats.items, 20);
    assert_eq!(names.len(), 20);
    assert_eq!(stats.pages, 20, "pages of one object");
    assert!(stats.bytes <= 20 * page_bytes as u64);

    // One object over a page's bound: refused, not read whole.
    let e = client
        .for_each_slice(
            ListLimits {
                page_bytes: one / 2,
                ..WIDE_OPEN
            },
            |_| ControlFlow::Continue(()),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            &e,
            Error::TooLarge {
                what: "one object",
                ..
            }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn an_error_status_of_the_list_is_the_api_servers() {
    let api = FakeApiServer::start().await.unwrap();
    api.fail_next("GET", 403, 1);
    let e = api
        .client()
        .unwrap()
        .for_each_slice(WIDE_OPEN, |_| ControlFlow::Continue(()))
        .await
        .unwrap_err();
    assert!(matches!(&e, Error::ApiStatus { code: 403, .. }), "{e}");
}
