//! The allocation report through the library API, on the seeds' fixture slices and templates:
//! what `dranet check` prints, for an embedder.

mod fixtures;

use dranet_alloc::DeviceTaintRule;
use dranet_alloc::report::{self, Claim, Host, Input, Note, RelationSource, Report, Verdict};
use dranet_core::Relation;
use fixtures::{docs, parse_docs, root};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};

fn classes() -> Vec<DeviceClass> {
    docs("examples/azure_aks/deviceclasses.yaml")
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect()
}

fn template(file: &str, name: &str) -> Claim {
    let t = docs(file)
        .into_iter()
        .map(|v| serde_json::from_value::<ResourceClaimTemplate>(v).unwrap())
        .find(|t| t.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("template {name} not in {file}"));
    Claim {
        name: name.into(),
        kind: "ResourceClaimTemplate".into(),
        spec: t.spec.spec,
    }
}

fn gb300(name: &str) -> Claim {
    template("examples/azure_aks/gb300/templates.yaml", name)
}

fn mi300x(name: &str) -> Claim {
    template("examples/azure_aks/mi300x/templates.yaml", name)
}

/// The fixture node's GPU and dra.net slices.
fn node_slices(node: &str) -> Vec<serde_json::Value> {
    let mut s = docs(&format!("testdata/slices/{node}-gpu.yaml"));
    s.extend(docs(&format!("testdata/slices/{node}-dranet.yaml")));
    s
}

fn input(slices: Vec<serde_json::Value>) -> Input {
    Input {
        slices: report::read_slices(slices).unwrap(),
        classes: Some(classes()),
        ..Input::default()
    }
}

/// The GB300 node's dra.net slices renamed to another node: GPUs on `aks-gb300-0`, NICs on
/// `aks-gb300-1`, as `kubectl get resourceslices` lists them on a two-node cluster.
fn nics_on_other_node() -> Vec<serde_json::Value> {
    let text =
        std::fs::read_to_string(root().join("testdata/slices/azure-nd-gb300-v6-dranet.yaml"))
            .unwrap();
    parse_docs(&text.replace("aks-gb300-0", "aks-gb300-1"))
}

fn verdicts(r: &Report) -> Vec<(Option<&str>, Verdict)> {
    r.claims
        .iter()
        .map(|c| (c.node.as_deref(), c.verdict))
        .collect()
}

#[test]
fn devices_of_two_nodes_are_never_paired() {
    let mut slices = docs("testdata/slices/azure-nd-gb300-v6-gpu.yaml");
    slices.extend(nics_on_other_node());
    let r = report::check(input(slices.clone()), &[gb300("1nic-aligned")]).unwrap();
    // GPUs on one node, NICs on the other: the claim needs both, so it fits on neither.
    assert_eq!(
        verdicts(&r),
        [
            (Some("aks-gb300-0"), Verdict::DoesNotFit),
            (Some("aks-gb300-1"), Verdict::DoesNotFit)
        ]
    );
    for c in &r.claims {
        assert!(c.devices.is_empty() && c.topology.is_empty(), "{c:?}");
        assert!(c.error.as_deref().is_some_and(|e| !e.is_empty()));
    }
    assert_eq!(
        report::summarize(&r),
        [
            "ResourceClaimTemplate 1nic-aligned: fits on none of 2 nodes; 1 of them: request nic: DeviceClass dranet.net selects none of the node's devices"
        ]
    );
    assert_eq!(
        best(&r),
        [("1nic-aligned".to_string(), Verdict::DoesNotFit)]
    );

    // The NICs on the GPUs' node too: it fits there, every device of that node's pools.
    slices.extend(docs("testdata/slices/azure-nd-gb300-v6-dranet.yaml"));
    let r = report::check(input(slices.clone()), &[gb300("1nic-aligned")]).unwrap();
    assert_eq!(
        verdicts(&r),
        [
            (Some("aks-gb300-0"), Verdict::Fits),
            (Some("aks-gb300-1"), Verdict::DoesNotFit)
        ]
    );
    assert!(
        r.claims[0].devices.iter().all(|d| d.pool == "aks-gb300-0"),
        "{:?}",
        r.claims[0].devices
    );
    assert_eq!(
        report::summarize(&r),
        [
            "ResourceClaimTemplate 1nic-aligned: fits on aks-gb300-0; does not fit on 1 other node(s)"
        ]
    );
    assert_eq!(best(&r), [("1nic-aligned".to_string(), Verdict::Fits)]);

    // One node asked for: only that one is checked.
    let mut one = input(slices);
    one.node = Some("aks-gb300-1".into());
    assert_eq!(
        one.nodes().into_iter().collect::<Vec<_>>(),
        ["aks-gb300-0", "aks-gb300-1"]
    );
    let r = report::check(one, &[gb300("1nic-aligned")]).unwrap();
    assert_eq!(verdicts(&r), [(Some("aks-gb300-1"), Verdict::DoesNotFit)]);
}

#[test]
fn device_taint_rules_taint_what_they_select_as_the_scheduler_does() {
    let rule = |selector: serde_json::Value, effect: &str| {
        DeviceTaintRule::from_json(
            0,
            &serde_json::json!({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceTaintRule",
                "metadata": {"name": "maintenance"},
                "spec": {
                    "deviceSelector": selector,
                    "taint": {"key": "example.com/maintenance", "value": "fw", "effect": effect},
                },
            }),
        )
        .unwrap()
    };
    let check = |rules: Vec<DeviceTaintRule>, version: &str| {
        let mut i = input(node_slices("azure-nd-gb300-v6"));
        i.taint_rules = rules;
        i.version = version.parse().unwrap();
        report::check(i, &[gb300("1nic-aligned")]).unwrap()
    };
    // mlx5_0 is pci-0101-00-00-0: tainted NoSchedule, the template's NIC is gone.
    let mlx5_0 = serde_json::json!({"driver": "dra.net", "pool": "aks-gb300-0", "device": "pci-0101-00-00-0"});
    let r = check(vec![rule(mlx5_0.clone(), "NoSchedule")], "1.37");
    let c = &r.claims[0];
    assert_eq!(c.verdict, Verdict::DoesNotFit, "{c:?}");
    assert_eq!(
        c.reason.as_deref(),
        Some(
            "request nic: each of the node's devices of DeviceClass dranet.net that pass the selectors has a taint the request does not tolerate (example.com/maintenance=fw:NoSchedule)"
        )
    );
    assert_eq!(
        r.notes.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["1 DeviceTaintRule(s) add 1 taint(s) to devices; a request must tolerate them"]
    );
    // Another pool, or another device: untouched.
    for other in [
        serde_json::json!({"driver": "dra.net", "pool": "aks-gb300-1"}),
        serde_json::json!({"device": "pci-0102-00-00-0"}),
    ] {
        assert_eq!(
            check(vec![rule(other, "NoSchedule")], "1.37").claims[0].verdict,
            Verdict::Fits
        );
    }
    // Effect None marks without keeping anyone off (1.35 and newer); 1.34 honours every effect.
    assert_eq!(
        check(vec![rule(mlx5_0.clone(), "None")], "1.37").claims[0].verdict,
        Verdict::Fits
    );
    // A selector for every device of the driver taints the node's four NICs.
    let r = check(
        vec![rule(serde_json::json!({"driver": "dra.net"}), "NoExecute")],
        "1.36",
    );
    assert_eq!(r.claims[0].verdict, Verdict::DoesNotFit);
    assert!(
        r.notes[0].to_string().contains("add 4 taint(s)"),
        "{:?}",
        r.notes
    );
}

#[test]
fn a_sys_placement_fits_unaligned_with_the_measured_cost() {
    let r = report::check(
        input(node_slices("azure-nd-gb300-v6")),
        &[gb300("1nic-aligned"), gb300("1nic-unaligned")],
    )
    .unwrap();
    let aligned = &r.claims[0];
    assert_eq!(aligned.verdict, Verdict::Fits);
    assert_eq!(aligned.topology[0].relation, Some(Relation::Node));
    assert!(aligned.warnings.is_empty());

    let c = &r.claims[1];
    assert_eq!(c.verdict, Verdict::FitsUnaligned, "{c:?}");
    let gpu = c.devices.iter().find(|d| !d.nic).unwrap();
    let nic = c.devices.iter().find(|d| d.nic).unwrap();
    assert_eq!((gpu.numa_node, nic.numa_node), (Some(0), Some(1)));
    assert_eq!(nic.label.as_deref(), Some("mlx5_2"));
    assert_eq!(c.topology.len(), 1);
    assert_eq!(c.topology[0].relation, Some(Relation::Sys));
    assert_eq!(c.topology[0].same_numa, Some(false));
    assert_eq!(c.topology[0].source, RelationSource::Attributes);
    assert_eq!(c.warnings.len(), 1);
    assert!(
        c.warnings[0]
            .starts_with("GPU gpu-0 is on NUMA node 0 but the claim's NICs mlx5_2 (NUMA 1)"),
        "{:?}",
        c.warnings
    );
    assert!(
        c.warnings[0].ends_with("GPUDirect RDMA is unlikely"),
        "{:?}",
        c.warnings
    );
    assert!(
        c.gpu_model.as_deref().is_some_and(|m| m.contains("GB300")),
        "{:?}",
        c.gpu_model
    );

    assert_eq!(
        report::summarize(&r),
        [
            "ResourceClaimTemplate 1nic-aligned: fits on aks-gb300-0",
            "ResourceClaimTemplate 1nic-unaligned: fits unaligned on aks-gb300-0"
        ]
    );
    assert_eq!(
        best(&r),
        [
            ("1nic-aligned".to_string(), Verdict::Fits),
            ("1nic-unaligned".to_string(), Verdict::FitsUnaligned)
        ]
    );
}

#[test]
fn stranded_gpus_are_one_warning_per_numa_node() {
    let r = report::check(
        input(node_slices("azure-nd-mi300x-v5")),
        &[
            mi300x("4nic-same-numa"),
            mi300x("4nic-cross-numa"),
            mi300x("8nic-all"),
        ],
    )
    .unwrap();
    let by = |n: &str| r.claims.iter().find(|c| c.name == n).unwrap();
    assert_eq!(by("4nic-same-numa").verdict, Verdict::Fits);
    let cross = by("4nic-cross-numa");
    assert_eq!(cross.verdict, Verdict::FitsUnaligned);
    assert_eq!(cross.warnings.len(), 1, "{:?}", cross.warnings);
    assert!(
        cross.warnings[0].starts_with("GPUs gpu-0, gpu-1, gpu-2, gpu-3 are on NUMA node 0"),
        "{:?}",
        cross.warnings
    );
    assert!(
        cross
            .gpu_model
            .as_deref()
            .is_some_and(|m| m.contains("MI300X")),
        "{:?}",
        cross.gpu_model
    );
    // Every GPU has a local NIC among the 8: aligned, although half the pairs cross NUMA.
    let all = by("8nic-all");
    assert_eq!(all.verdict, Verdict::Fits);
    assert_eq!(all.topology.len(), 64);
    let sys = all
        .topology
        .iter()
        .filter(|p| p.relation == Some(Relation::Sys))
        .count();
    assert_eq!(sys, 32);
}

/// A claim for `count` NICs on NUMA node 0 (the GB300 node has 2).
fn numa0_nics(name: &str, count: i64) -> Claim {
    Claim {
        name: name.into(),
        kind: "ResourceClaim".into(),
        spec: serde_json::from_value(serde_json::json!({"devices": {"requests": [{
            "name": "nic",
            "exactly": {
                "deviceClassName": "dranet.net",
                "count": count,
                "selectors": [{"cel": {"expression": "device.attributes[\"dra.net\"].numaNode == 0"}}]
            }
        }]}}))
        .unwrap(),
    }
}

#[test]
fn a_cel_error_is_invalid_and_outranks_a_misfit() {
    let r = report::check(
        input(node_slices("azure-nd-gb300-v6")),
        &[numa0_nics("four-numa0", 4), gb300("ib-same-fabric")],
    )
    .unwrap();
    assert_eq!(
        verdicts(&r),
        [
            (Some("aks-gb300-0"), Verdict::DoesNotFit),
            (Some("aks-gb300-0"), Verdict::Invalid)
        ]
    );
    // The scheduler's error for the claim: a selector reading an attribute the device lacks.
    assert!(
        r.claims[1]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("no such key")),
        "{:?}",
        r.claims[1].error
    );
    assert!(
        best(&r).contains(&("ib-same-fabric".to_string(), Verdict::Invalid)),
        "{:?}",
        best(&r)
    );
    assert_eq!(
        report::summarize(&r),
        [
            "ResourceClaim four-numa0: does not fit",
            "ResourceClaimTemplate ib-same-fabric: invalid (the scheduler would fail the pod)"
        ]
    );
}

#[test]
fn the_hosts_devices_replace_its_nodes_dranet_slices() {
    // A claim for 4 NUMA-0 NICs on a node with 2: the host's slices and the same node's slices
    // among the inputs must not add up to 4.
    let claim = numa0_nics("four-numa0", 4);
    let two = numa0_nics("two-numa0", 2);
    let host = Host {
        node: "aks-gb300-0".into(),
        inventory: Default::default(),
        slices: docs("testdata/slices/azure-nd-gb300-v6-dranet.yaml"),
    };
    let mut i = input(node_slices("azure-nd-gb300-v6"));
    i.host = Some(host);
    let r = report::check(i, &[claim, two]).unwrap();
    assert_eq!(
        verdicts(&r),
        [
            (Some("aks-gb300-0"), Verdict::DoesNotFit),
            (Some("aks-gb300-0"), Verdict::Fits)
        ]
    );
    assert!(
        r.notes.contains(&Note::HostSlicesReplaced {
            node: "aks-gb300-0".into(),
            slices: 1
        }),
        "{:?}",
        r.notes
    );
}

#[test]
fn without_classes_each_driver_gets_one_and_the_json_keeps_its_shape() {
    let r = report::check(
        Input {
            slices: report::read_slices(node_slices("bm-mi300x-8")).unwrap(),
            ..Input::default()
        },
        &[mi300x("gpu1-same-pcie-root")],
    )
    .unwrap();
    assert_eq!(
        r.notes[0],
        Note::DefaultClasses {
            names: vec!["dra.net".into(), "gpu.amd.com".into(), "dranet.net".into()]
        }
    );
    let c = &r.claims[0];
    assert_eq!(c.verdict, Verdict::Fits, "{:?}", c.error);
    // Same pcieRoot attribute: PHB or closer is all attributes can tell.
    assert_eq!(c.topology[0].relation, Some(Relation::Phb));
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["claims"][0]["verdict"], "fits");
    assert_eq!(json["claims"][0]["topology"][0]["source"], "attributes");
    assert_eq!(json["claims"][0]["topology"][0]["relation"], "PHB");
    assert_eq!(
        json["claims"][0]["devices"][1]["numaNode"],
        c.devices[1].numa_node.unwrap()
    );
    assert_eq!(json["notes"][0], r.notes[0].to_string());
}

/// A list-valued attribute, which only the JSON carries (the v1.34 structs cannot), reaches the
/// allocator through the report: its slices' JSON trees are shrunk once parsed, and keep it.
#[test]
fn list_valued_attributes_survive_the_parse() {
    let slice = |node: &str, names: serde_json::Value| {
        serde_json::json!({
            "metadata": {"name": format!("{node}-dra.net-0")},
            "spec": {
                "driver": "dra.net", "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": "nic0", "attributes": {"dra.net/numaNode": {"int": 0}}},
                    {"name": "nic1", "attributes": {"dra.net/numaNode": {"int": 0}, "dra.net/names": names}}
                ]
            }
        })
    };
    let claim = Claim {
        name: "nic".into(),
        kind: "ResourceClaim".into(),
        spec: serde_json::from_value(serde_json::json!({"devices": {"requests": [{"name": "nic",
            "exactly": {"deviceClassName": "dranet.net", "count": 2}}]}}))
        .unwrap(),
    };
    let lists = Input {
        slices: report::read_slices(vec![slice(
            "a",
            serde_json::json!({"strings": ["eth0", "ib0"]}),
        )])
        .unwrap(),
        ..Input::default()
    };
    let r = report::check(lists, std::slice::from_ref(&claim)).unwrap();
    assert_eq!(verdicts(&r), [(Some("a"), Verdict::Fits)]);
    // Both a scalar and a list: refused, which the allocator can only see in the JSON.
    let both = Input {
        slices: report::read_slices(vec![slice("a", serde_json::json!({"int": 1, "ints": [1]}))])
            .unwrap(),
        ..Input::default()
    };
    let e = report::check(both, &[claim]).unwrap_err().to_string();
    assert!(e.contains("more than one value type"), "{e}");
}

/// The shared NIC of `testdata/slices/nic-share.yaml` (3 children) and one template of
/// `examples/sharing/nic-share.yaml` (1 child each), for `pods` pods on `version`.
fn share(pods: u32, version: &str) -> Report {
    share_asking(pods, version, "children")
}

/// [`share`], the template asking one of the capacity `capacity` instead of `children`.
fn share_asking(pods: u32, version: &str, capacity: &str) -> Report {
    let t = docs("examples/sharing/nic-share.yaml");
    let classes: Vec<DeviceClass> = t
        .iter()
        .filter(|d| d["kind"] == "DeviceClass")
        .map(|d| serde_json::from_value(d.clone()).unwrap())
        .collect();
    let input = Input {
        slices: report::read_slices(docs("testdata/slices/nic-share.yaml")).unwrap(),
        classes: Some(classes),
        version: version.parse().unwrap(),
        pods: report::Pods::new(pods).unwrap(),
        ..Input::default()
    };
    let t = t
        .into_iter()
        .find(|d| d["metadata"]["name"] == "nic-share-a")
        .unwrap();
    let mut t: ResourceClaimTemplate = serde_json::from_value(t).unwrap();
    let exact = t
        .spec
        .spec
        .devices
        .as_mut()
        .unwrap()
        .requests
        .as_mut()
        .unwrap()[0]
        .exactly
        .as_mut()
        .unwrap();
    let requests = exact.capacity.as_mut().unwrap().requests.as_mut().unwrap();
    let one = requests.remove("children").unwrap();
    requests.insert(capacity.to_string(), one);
    let claim = Claim {
        name: "nic-share-a".into(),
        kind: "ResourceClaimTemplate".into(),
        spec: t.spec.spec,
    };
    report::check(input, &[claim]).unwrap()
}

#[test]
fn pods_share_a_nic_as_many_times_as_it_has_children() {
    let r = share(3, "1.36");
    let c = &r.claims[0];
    assert_eq!(c.verdict, Verdict::Fits, "{c:?}");
    assert_eq!(c.pods.map(|p| (p.asked, p.fit)), Some((3, 3)));
    let devices: Vec<_> = c
        .devices
        .iter()
        .map(|d| (d.pod, d.label.as_deref()))
        .collect();
    assert_eq!(
        devices,
        [
            (Some(1), Some("mlx5_0")),
            (Some(2), Some("mlx5_0")),
            (Some(3), Some("mlx5_0"))
        ]
    );

    let r = share(4, "1.36");
    let c = &r.claims[0];
    assert_eq!(c.verdict, Verdict::DoesNotFit);
    assert_eq!(c.pods.map(|p| (p.asked, p.fit)), Some((4, 3)));
    let error = c.error.as_deref().unwrap();
    assert!(error.starts_with("pod 4 of 4: "), "{error}");
    assert!(c.reason.as_deref().unwrap().starts_with("pod 4 of 4: "));
    let json = serde_json::to_value(c).unwrap();
    assert_eq!(json["pods"], serde_json::json!({"asked": 4, "fit": 3}));
    assert_eq!(json["devices"][2]["pod"], 3);

    // One pod: the report of a claim on its own, no count in it.
    let r = share(1, "1.36");
    let json = serde_json::to_value(&r.claims[0]).unwrap();
    assert_eq!(r.claims[0].pods, None);
    assert!(json.get("pods").is_none() && json["devices"][0].get("pod").is_none());
}

#[test]
fn a_capacity_asked_by_its_qualified_name_is_named_as_the_slice_writes_it() {
    // The scheduler (1.36, 1.37) compares capacity names as written: dra.net publishes
    // `children`, so `dra.net/children` finds no device, and check says what to write.
    let c = &share_asking(1, "1.36", "dra.net/children").claims[0];
    assert_eq!(c.verdict, Verdict::DoesNotFit, "{c:?}");
    assert_eq!(
        c.reason.as_deref(),
        Some(
            r#"request nic: capacity dra.net/children: dra.net publishes it as "children", and the scheduler matches capacity names as written: request "children""#
        ),
        "{c:?}"
    );
    let c = &share_asking(1, "1.36", "queues").claims[0];
    assert_eq!(c.verdict, Verdict::DoesNotFit, "{c:?}");
    assert_eq!(
        c.reason.as_deref(),
        Some(
            "request nic: capacity queues: none of the node's devices of DeviceClass dranet-share that pass the selectors has it"
        ),
        "{c:?}"
    );
}

#[test]
fn pods_asking_capacity_are_refused_on_1_34() {
    for pods in [1, 4] {
        let c = &share(pods, "1.34").claims[0];
        assert_eq!(c.verdict, Verdict::Invalid, "{c:?}");
        let error = c.error.as_deref().unwrap();
        assert!(
            error.contains("a capacity request (DRAConsumableCapacity) is requested, but the feature is disabled"),
            "{error}"
        );
    }
}

#[test]
fn pods_of_exclusive_nics_take_one_each() {
    // A claim for the node's NIC that is not shared: the first pod holds it whole, the second
    // finds it taken.
    let claim = Claim {
        name: "any-rdma".into(),
        kind: "ResourceClaimTemplate".into(),
        spec: serde_json::from_value(serde_json::json!({"devices": {"requests": [{"name": "nic",
            "exactly": {"deviceClassName": "dra.net",
                "selectors": [{"cel": {"expression": "!(\"children\" in device.capacity[\"dra.net\"])"}}]}}]}}))
        .unwrap(),
    };
    let check = |pods| {
        let input = Input {
            slices: report::read_slices(docs("testdata/slices/nic-share.yaml")).unwrap(),
            pods: report::Pods::new(pods).unwrap(),
            ..Input::default()
        };
        report::check(input, std::slice::from_ref(&claim)).unwrap()
    };
    let r = check(1);
    assert_eq!(r.claims[0].verdict, Verdict::Fits, "{:?}", r.claims[0]);
    let r = check(2);
    let c = &r.claims[0];
    assert_eq!(c.verdict, Verdict::DoesNotFit);
    assert_eq!(c.pods.map(|p| p.fit), Some(1));
    assert!(c.error.as_deref().unwrap().starts_with("pod 2 of 2: "));
}

/// Each claim's best verdict over its nodes.
fn best(r: &Report) -> Vec<(String, Verdict)> {
    report::per_claim(r)
        .into_iter()
        .map(|v| (v.claim.name.clone(), v.best))
        .collect()
}
