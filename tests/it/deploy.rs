//! `deploy/`: the Helm chart is the one source of the install. `install.yaml` is the chart rendered
//! with its default values (plus the Namespace), every object of it and of the chart rendered with
//! each `ci/*-values.yaml` parses into its Kubernetes type and loses no field doing so, each value
//! takes effect, `helm lint --strict` is clean, a typo in values is an error from helm, and the
//! DaemonSet keeps the properties docs/security.md promises (not privileged, its capabilities,
//! its probes, only the host paths the daemon uses, no blanket toleration, the admission policy
//! bound to its service account).
//!
//! The chart tests need helm (`.ci/helm.sh` installs it); without it they print `SKIP` and pass.

use std::collections::BTreeSet;
use std::path::Path;

use crate::support::chart::{
    CHART_KINDS, GUIDE_HELM_INSTALL, GUIDE_HELM_UNINSTALL, GUIDE_HELM_UPGRADE, chart, documents,
    helm, root, template,
};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, PodSpec, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::resource::v1::DeviceClass;
use k8s_openapi::serde::Serialize;
use k8s_openapi::serde::de::DeserializeOwned;

fn read(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    documents(&text)
}

/// `doc` as `T`, which must keep every field: k8s-openapi ignores fields it does not know, so a
/// misspelt field would otherwise pass here and be refused (or dropped) by the API server.
fn typed<T: DeserializeOwned + Serialize>(doc: &serde_json::Value, what: &str) -> T {
    let t: T = serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let back = serde_json::to_value(&t).unwrap();
    assert_eq!(&back, doc, "{what}: a field was lost parsing it");
    t
}

/// Parses `doc` as the type its `kind` names; unknown kinds fail.
fn parse_typed(doc: &serde_json::Value, what: &str) {
    let what = format!("{what}: {} {}", doc["kind"], doc["metadata"]["name"]);
    match doc["kind"].as_str().unwrap_or_default() {
        "Namespace" => {
            typed::<Namespace>(doc, &what);
        }
        "ServiceAccount" => {
            typed::<ServiceAccount>(doc, &what);
        }
        "ClusterRole" => {
            typed::<ClusterRole>(doc, &what);
        }
        "ClusterRoleBinding" => {
            typed::<ClusterRoleBinding>(doc, &what);
        }
        "DeviceClass" => {
            typed::<DeviceClass>(doc, &what);
        }
        "DaemonSet" => {
            typed::<DaemonSet>(doc, &what);
        }
        "Service" => {
            typed::<Service>(doc, &what);
        }
        "ValidatingAdmissionPolicy" => {
            typed::<ValidatingAdmissionPolicy>(doc, &what);
        }
        "ValidatingAdmissionPolicyBinding" => {
            typed::<ValidatingAdmissionPolicyBinding>(doc, &what);
        }
        // prometheus-operator's type; k8s-openapi has none. Checked field by field below.
        "ServiceMonitor" => {}
        other => panic!("{what}: unexpected kind {other:?}"),
    }
}

/// helm, or a SKIP line.
fn helm_or_skip(test: &str) -> Option<std::path::PathBuf> {
    let h = helm();
    if h.is_none() {
        eprintln!("SKIP {test}: no helm (run .ci/helm.sh)");
    }
    h
}

/// The chart rendered with these helm arguments, which must succeed.
fn render(helm: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    let out = template(helm, args);
    assert!(
        out.status.success(),
        "helm template {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    documents(&String::from_utf8_lossy(&out.stdout))
}

fn values_file(name: &str) -> String {
    chart().join("ci").join(name).display().to_string()
}

fn kind<'a>(docs: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn daemonset(docs: &[serde_json::Value]) -> DaemonSet {
    let ds = kind(docs, "DaemonSet");
    assert_eq!(ds.len(), 1, "one DaemonSet");
    serde_json::from_value(ds[0].clone()).unwrap()
}

fn pod_spec(ds: &DaemonSet) -> PodSpec {
    ds.spec.clone().unwrap().template.spec.unwrap()
}

/// `mountPath` → (volume's host path, read-only) of the daemon's container.
fn host_mounts(pod: &PodSpec) -> Vec<(String, String, bool)> {
    let c = &pod.containers[0];
    let volumes = pod.volumes.clone().unwrap_or_default();
    c.volume_mounts
        .iter()
        .flatten()
        .map(|m| {
            let v = volumes
                .iter()
                .find(|v| v.name == m.name)
                .unwrap_or_else(|| panic!("no volume {}", m.name));
            let host = v
                .host_path
                .as_ref()
                .map(|h| h.path.clone())
                .unwrap_or_default();
            (m.mount_path.clone(), host, m.read_only == Some(true))
        })
        .collect()
}

#[test]
fn every_manifest_parses_into_its_kubernetes_type() {
    let install = read(&root().join("deploy/install.yaml"));
    for d in &install {
        parse_typed(d, "deploy/install.yaml");
    }
    let kinds: BTreeSet<&str> = install.iter().filter_map(|d| d["kind"].as_str()).collect();
    let want: BTreeSet<&str> = CHART_KINDS.into_iter().chain(["Namespace"]).collect();
    assert_eq!(kinds, want);
    // `kubectl apply -k deploy` is install.yaml, nothing else.
    let k = read(&root().join("deploy/kustomization.yaml"));
    assert_eq!(k[0]["resources"], serde_json::json!(["install.yaml"]));
}

#[test]
fn install_yaml_is_the_chart_rendered_with_its_defaults() {
    let Some(helm) = helm_or_skip("install.yaml against the chart") else {
        return;
    };
    let install = read(&root().join("deploy/install.yaml"));
    assert_eq!(install[0]["kind"], "Namespace");
    assert_eq!(install[0]["metadata"]["name"], "dranet");
    let rendered = render(&helm, &[]);
    assert_eq!(
        install[1..],
        rendered[..],
        "deploy/install.yaml is not the chart's default rendering: run deploy/gen-install.sh"
    );
}

#[test]
fn helm_lint_is_strict_clean_with_every_value_set() {
    let Some(helm) = helm_or_skip("helm lint") else {
        return;
    };
    for values in [
        None,
        Some("custom-values.yaml"),
        Some("minimal-values.yaml"),
        Some("servicemonitor-values.yaml"),
    ] {
        let mut cmd = std::process::Command::new(&helm);
        cmd.args(["lint", "--strict"]).arg(chart());
        if let Some(v) = values {
            cmd.args(["-f", &values_file(v)]);
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("0 chart(s) failed"),
            "helm lint --strict {values:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn every_value_set_renders_typed_objects() {
    let Some(helm) = helm_or_skip("the chart's value sets") else {
        return;
    };
    let mut n = 0;
    for v in [
        "custom-values.yaml",
        "minimal-values.yaml",
        "servicemonitor-values.yaml",
    ] {
        for d in render(&helm, &["-f", &values_file(v)]) {
            parse_typed(&d, v);
            n += 1;
        }
    }
    assert!(n >= 17, "{n} objects");
}

#[test]
fn each_value_takes_effect() {
    let Some(helm) = helm_or_skip("the chart's values") else {
        return;
    };
    let docs = render(&helm, &["-f", &values_file("custom-values.yaml")]);
    let ds = daemonset(&docs);
    assert_eq!(ds.metadata.name.as_deref(), Some("dranet-rs"));
    let pod = pod_spec(&ds);
    let c = &pod.containers[0];
    assert_eq!(
        c.image.as_deref(),
        Some("registry.example.com/dranet:0.1.0-rc1")
    );
    assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
    assert_eq!(
        pod.image_pull_secrets.as_ref().unwrap()[0].name,
        "registry-creds"
    );
    let args = c.args.clone().unwrap();
    for want in [
        "--kubelet-root-dir=/var/lib/k0s/kubelet",
        "--nri-socket=/run/containerd/nri/nri.sock",
        "--state-dir=/var/lib/dranet",
        "--bind-address=:9300",
        "--log-format=text",
        "--log=info,dranet_driver=debug",
        r#"--filter=!("type" in device.attributes["dra.net"]) || device.attributes["dra.net"].type != "veth""#,
        "--move-ib-interfaces=false",
        "--cloud-provider-hint=azure",
        "--azure-imds-endpoint=http://169.254.169.254",
        "--pci-ids=/usr/share/hwdata/pci.ids",
        "--uplink-interfaces=eth0",
        r#"--share-filter=device.attributes["dra.net"].ifName == "eth1""#,
        "--share-children=4",
        "--feature-gates=DRAListTypeAttributes=true",
        "--azure-imds-api-version=2021-02-01",
        "--provider-refresh-timeout=1m",
        "--profile-provider=webhook",
        "--webhook-url=http://127.0.0.1:8081",
        "--webhook-ca-file=/etc/dranet/webhook-ca.pem",
        "--webhook-timeout=3s",
        "--hotplug=false",
        "--inventory-min-poll-interval=500ms",
        "--inventory-max-poll-interval=10m",
        "--inventory-poll-burst=3",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} not in {args:?}");
    }
    // Every path value is mounted at the same path inside.
    let mounts = host_mounts(&pod);
    for (path, ro) in [
        ("/var/lib/k0s/kubelet/plugins_registry", false),
        ("/var/lib/k0s/kubelet/plugins/dra.net", false),
        ("/run/containerd/nri", false),
        ("/var/lib/dranet", false),
        ("/usr/share/hwdata", true),
        ("/etc/dranet", true),
    ] {
        assert!(
            mounts
                .iter()
                .any(|(m, h, r)| m == path && (h == path || path == "/etc/dranet") && *r == ro),
            "{path} (read-only {ro}) not mounted: {mounts:?}"
        );
    }
    let port = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .and_then(|p| p.http_get.as_ref())
            .map(|h| h.port.clone())
    };
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    assert_eq!(port(&c.readiness_probe), Some(IntOrString::Int(9300)));
    assert_eq!(port(&c.liveness_probe), Some(IntOrString::Int(9300)));
    assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 9300);
    let res = c.resources.as_ref().unwrap();
    assert_eq!(res.limits.as_ref().unwrap()["memory"].0, "256Mi");
    assert_eq!(res.requests.as_ref().unwrap()["cpu"].0, "100m");
    assert!(pod.priority_class_name.is_none());
    assert_eq!(
        pod.node_selector.as_ref().unwrap()["node.kubernetes.io/gpu"],
        "true"
    );
    assert!(pod.affinity.as_ref().unwrap().node_affinity.is_some());
    let tol = pod.tolerations.as_ref().unwrap();
    assert_eq!(tol.len(), 1);
    assert_eq!(tol[0].operator.as_deref(), Some("Exists"));
    assert!(
        c.env
            .iter()
            .flatten()
            .any(|e| e.name == "RUST_BACKTRACE" && e.value.as_deref() == Some("1"))
    );
    let tmpl = ds
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap();
    assert_eq!(
        tmpl.annotations.as_ref().unwrap()["example.com/team"],
        "hpc"
    );
    assert_eq!(tmpl.labels.as_ref().unwrap()["example.com/tier"], "node");
    // The service account's name reaches the pod, the binding and the admission policy.
    assert_eq!(pod.service_account_name.as_deref(), Some("dranet-daemon"));
    let sa: ServiceAccount =
        serde_json::from_value(kind(&docs, "ServiceAccount")[0].clone()).unwrap();
    assert_eq!(sa.metadata.name.as_deref(), Some("dranet-daemon"));
    assert_eq!(
        sa.metadata.annotations.as_ref().unwrap()["example.com/owner"],
        "hpc"
    );
    let crb: ClusterRoleBinding =
        serde_json::from_value(kind(&docs, "ClusterRoleBinding")[0].clone()).unwrap();
    assert_eq!(crb.subjects.as_ref().unwrap()[0].name, "dranet-daemon");
    let vap: ValidatingAdmissionPolicy =
        serde_json::from_value(kind(&docs, "ValidatingAdmissionPolicy")[0].clone()).unwrap();
    let cond = &vap.spec.unwrap().match_conditions.unwrap()[0].expression;
    assert!(
        cond.contains("system:serviceaccount:dranet:dranet-daemon"),
        "{cond}"
    );
    // The DeviceClass: the driver, the extra selector, the parameters.
    let classes = kind(&docs, "DeviceClass");
    assert_eq!(classes.len(), 1);
    let class: DeviceClass = serde_json::from_value(classes[0].clone()).unwrap();
    assert_eq!(class.metadata.name.as_deref(), Some("rdma-nic"));
    let exprs: Vec<String> = class
        .spec
        .selectors
        .iter()
        .flatten()
        .filter_map(|s| s.cel.as_ref().map(|c| c.expression.clone()))
        .collect();
    assert_eq!(
        exprs,
        [
            r#"device.driver == "dra.net""#,
            r#"device.attributes["dra.net"].rdma == true"#
        ]
    );
    let config = &class.spec.config.as_ref().unwrap()[0];
    let opaque = config.opaque.as_ref().unwrap();
    assert_eq!(opaque.driver, "dra.net");
    assert_eq!(opaque.parameters.0["interface"]["mtu"], 4000);

    // Device metadata needs the CDI directory without the hook too; off, neither needs it.
    let cdi_of = |args: &[&str]| {
        let pod = pod_spec(&daemonset(&render(&helm, args)));
        let args = pod.containers[0].args.clone().unwrap_or_default();
        let mounted = host_mounts(&pod)
            .iter()
            .any(|(m, h, _)| m == "/var/run/cdi" && h == "/var/run/cdi");
        (mounted, args)
    };
    let (mounted, args) = cdi_of(&["--set", "hook.enabled=false"]);
    assert!(
        mounted,
        "metadata without the hook mounts the CDI directory"
    );
    assert!(
        args.iter().any(|a| a == "--cdi-dir=/var/run/cdi"),
        "{args:?}"
    );
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--enable-device-metadata")),
        "{args:?}"
    );
    let (mounted, args) = cdi_of(&[
        "--set",
        "hook.enabled=false",
        "--set",
        "deviceMetadata.enabled=false",
    ]);
    assert!(!mounted, "neither hook nor metadata: no CDI directory");
    assert!(
        args.iter().any(|a| a == "--enable-device-metadata=false"),
        "{args:?}"
    );
    assert!(!args.iter().any(|a| a.starts_with("--cdi-dir")), "{args:?}");
    // The versions, when chosen, go to the daemon as its flag.
    let (_, args) = cdi_of(&["--set", "deviceMetadata.versions={v1alpha1}"]);
    assert!(
        args.iter()
            .any(|a| a == "--device-metadata-versions=v1alpha1"),
        "{args:?}"
    );
    let (_, args) = cdi_of(&[]);
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--device-metadata-versions")),
        "the default leaves the daemon's: {args:?}"
    );

    // Everything optional off.
    let docs = render(&helm, &["-f", &values_file("minimal-values.yaml")]);
    let kinds: BTreeSet<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(kinds, BTreeSet::from(["DaemonSet", "ServiceAccount"]));
    let pod = pod_spec(&daemonset(&docs));
    assert!(pod.tolerations.is_none());
    assert!(pod.containers[0].resources.is_none());
    assert!(
        !host_mounts(&pod)
            .iter()
            .any(|(m, _, _)| m == "/usr/share/misc"),
        "pciIdsDir: \"\" mounts nothing"
    );

    // The ServiceMonitor scrapes the Service's port, which selects the DaemonSet's pods.
    let docs = render(&helm, &["-f", &values_file("servicemonitor-values.yaml")]);
    let pod_labels = daemonset(&docs)
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .labels
        .unwrap();
    let svc: Service = serde_json::from_value(kind(&docs, "Service")[0].clone()).unwrap();
    let spec = svc.spec.unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    for (k, v) in spec.selector.as_ref().unwrap() {
        assert_eq!(pod_labels.get(k), Some(v), "the Service selects the pods");
    }
    let port = &spec.ports.as_ref().unwrap()[0];
    assert_eq!(port.name.as_deref(), Some("metrics"));
    let sm = kind(&docs, "ServiceMonitor")[0];
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["metadata"]["labels"]["release"], "kube-prometheus-stack");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");
    assert_eq!(sm["spec"]["endpoints"][0]["interval"], "15s");
    assert_eq!(sm["spec"]["namespaceSelector"]["matchNames"][0], "dranet");
    for (k, v) in spec.selector.as_ref().unwrap() {
        assert_eq!(sm["spec"]["selector"]["matchLabels"][k], v.as_str());
    }
}

#[test]
fn a_mistake_in_values_is_an_error_from_helm() {
    let Some(helm) = helm_or_skip("values.schema.json") else {
        return;
    };
    for (args, want) in [
        (
            &["--set", "imagee.tag=x"][..],
            "additional properties 'imagee' not allowed",
        ),
        (
            &["--set", "tolerations[0].operater=Exists"],
            "'operater' not allowed",
        ),
        (&["--set", "metrics.port=0"], "/metrics/port"),
        (
            &["--set", "kubeletRootDir=var/lib/kubelet"],
            "/kubeletRootDir",
        ),
        (&["--set", "cloudProviderHint=gcp"], "/cloudProviderHint"),
        (&["--set", "log.format=yaml"], "/log/format"),
        (
            &["--set", "deviceMetadata.enabled=1"],
            "/deviceMetadata/enabled",
        ),
        (
            &["--set", "deviceMetadata.versions={v1}"],
            "/deviceMetadata/versions/0",
        ),
        (&["--set", "extraArgs[0]=run"], "/extraArgs/0"),
        (
            &["--set", "deviceClasses[0].name=Bad_Name"],
            "/deviceClasses/0/name",
        ),
        (
            &["--set", "extraVolumes[0].name=state"],
            "/extraVolumes/0/name",
        ),
    ] {
        let out = template(&helm, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(want),
            "{args:?}: want an error with {want:?}, got: {err}"
        );
    }
}

#[test]
fn the_daemonset_is_unprivileged_with_probes_and_only_its_host_paths() {
    let docs = read(&root().join("deploy/install.yaml"));
    let ds = daemonset(&docs);
    let pod = pod_spec(&ds);
    assert_eq!(pod.host_network, Some(true));
    let c = &pod.containers[0];
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.privileged, Some(false));
    let caps = sc.capabilities.as_ref().unwrap();
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
    assert_eq!(
        caps.add.as_deref(),
        Some(&["NET_ADMIN".to_string(), "SYS_ADMIN".to_string()][..])
    );
    let path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.path.clone())
    };
    assert_eq!(path(&c.readiness_probe).as_deref(), Some("/readyz"));
    assert_eq!(path(&c.liveness_probe).as_deref(), Some("/healthz"));

    // Exactly the host paths the daemon uses: its own plugin directory, not every driver's.
    let mounts: BTreeSet<(String, String, bool)> = host_mounts(&pod).into_iter().collect();
    let want: BTreeSet<(String, String, bool)> = [
        (
            "/var/lib/kubelet/plugins_registry",
            "/var/lib/kubelet/plugins_registry",
            false,
        ),
        (
            "/var/lib/kubelet/plugins/dra.net",
            "/var/lib/kubelet/plugins/dra.net",
            false,
        ),
        ("/var/run/nri", "/var/run/nri", false),
        ("/var/run/netns", "/run/netns", false),
        ("/var/run/dranet", "/var/run/dranet", false),
        ("/usr/share/misc", "/usr/share/misc", true),
        // The hook as the host has it, read-only; the CDI specs that carry it.
        ("/opt/dranet/bin", "/opt/dranet/bin", true),
        ("/var/run/cdi", "/var/run/cdi", false),
    ]
    .into_iter()
    .map(|(m, h, r)| (m.to_string(), h.to_string(), r))
    .collect();
    assert_eq!(mounts, want);
    let args = c.args.clone().unwrap();
    for a in [
        "--kubelet-root-dir=/var/lib/kubelet",
        "--nri-socket=/var/run/nri/nri.sock",
        "--state-dir=/var/run/dranet",
        "--hook-path=/opt/dranet/bin/dranet",
        "--cdi-dir=/var/run/cdi",
        "--nri-request-timeout=2s",
    ] {
        assert!(args.iter().any(|x| x == a), "{a} not in {args:?}");
    }

    // The hook's installer: unprivileged, one capability, the host read-only but for the
    // hook's directory.
    let init = pod.init_containers.clone().unwrap_or_default();
    assert_eq!(init.len(), 1, "{init:?}");
    let isc = init[0].security_context.as_ref().unwrap();
    assert_eq!(isc.privileged, Some(false));
    let icaps = isc.capabilities.as_ref().unwrap();
    assert_eq!(icaps.add.as_deref(), Some(&["SYS_CHROOT".to_string()][..]));
    let imounts: BTreeSet<(String, bool)> = init[0]
        .volume_mounts
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|m| (m.mount_path, m.read_only.unwrap_or(false)))
        .collect();
    assert_eq!(
        imounts,
        [
            ("/host".to_string(), true),
            ("/host/opt/dranet/bin".to_string(), false)
        ]
        .into_iter()
        .collect()
    );

    // Tolerations: named taints only; nothing that tolerates every taint or the control plane's.
    let tol = pod.tolerations.clone().unwrap_or_default();
    assert!(!tol.is_empty(), "GPU nodes' taints are tolerated");
    for t in &tol {
        assert!(
            t.key.is_some(),
            "a toleration without a key tolerates every taint: {t:?}"
        );
        let key = t.key.as_deref().unwrap();
        assert!(
            !key.starts_with("node-role.kubernetes.io/"),
            "the control plane's taint is tolerated: {t:?}"
        );
    }

    // The DeviceClasses of upstream and of the AKS templates.
    let classes: Vec<&str> = kind(&docs, "DeviceClass")
        .iter()
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    assert_eq!(classes, ["dranet", "dranet.net"]);
}

#[test]
fn rbac_and_admission_policy_bind_the_daemons_service_account() {
    let docs = read(&root().join("deploy/install.yaml"));
    let ds = daemonset(&docs);
    let ns = ds.metadata.namespace.clone().unwrap();
    let sa = pod_spec(&ds).service_account_name.unwrap();
    let user = format!("system:serviceaccount:{ns}:{sa}");

    // 1.36's granular status authorization: only the dra.net entries of claims on the token's node.
    let role: ClusterRole = serde_json::from_value(kind(&docs, "ClusterRole")[0].clone()).unwrap();
    let rules = role.rules.unwrap();
    let driver = rules
        .iter()
        .find(|r| {
            r.resources
                .iter()
                .flatten()
                .any(|x| x == "resourceclaims/driver")
        })
        .expect("a resourceclaims/driver rule");
    assert_eq!(driver.verbs, ["associated-node:patch"]);
    assert_eq!(
        driver.resource_names.as_deref(),
        Some(&["dra.net".to_string()][..])
    );
    assert!(
        !rules
            .iter()
            .flat_map(|r| &r.verbs)
            .any(|v| v.starts_with("arbitrary-node:") || v == "*"),
        "no arbitrary-node or wildcard verb"
    );
    let crb: ClusterRoleBinding =
        serde_json::from_value(kind(&docs, "ClusterRoleBinding")[0].clone()).unwrap();
    let subject = &crb.subjects.unwrap()[0];
    assert_eq!(
        (subject.name.as_str(), subject.namespace.as_deref()),
        (sa.as_str(), Some(ns.as_str()))
    );

    // The admission policy: the daemon's service account, slices only, denied when invalid.
    let vap: ValidatingAdmissionPolicy =
        serde_json::from_value(kind(&docs, "ValidatingAdmissionPolicy")[0].clone()).unwrap();
    let name = vap.metadata.name.clone().unwrap();
    let spec = vap.spec.unwrap();
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    let cond = &spec.match_conditions.unwrap()[0].expression;
    assert!(cond.contains(&format!("{user:?}")), "{cond}");
    let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["resourceslices".to_string()][..])
    );
    let ops: BTreeSet<&str> = rules[0]
        .operations
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    assert_eq!(ops, BTreeSet::from(["CREATE", "DELETE", "UPDATE"]));
    let binding: ValidatingAdmissionPolicyBinding =
        serde_json::from_value(kind(&docs, "ValidatingAdmissionPolicyBinding")[0].clone()).unwrap();
    let bspec = binding.spec.unwrap();
    assert_eq!(bspec.policy_name.as_deref(), Some(name.as_str()));
    assert_eq!(
        bspec.validation_actions.as_deref(),
        Some(&["Deny".to_string()][..])
    );
}

#[test]
fn the_install_guide_shows_the_helm_commands_the_real_node_runs() {
    let guide = std::fs::read_to_string(root().join("docs/install.md")).unwrap();
    // Lines of the guide's shell blocks.
    let mut shown = BTreeSet::new();
    let mut in_sh = false;
    for l in guide.lines() {
        if l.starts_with("```") {
            in_sh = l == "```sh";
        } else if in_sh {
            shown.insert(l.trim());
        }
    }
    for line in GUIDE_HELM_INSTALL
        .iter()
        .chain([&GUIDE_HELM_UPGRADE])
        .chain(GUIDE_HELM_UNINSTALL.iter())
    {
        assert!(
            shown.contains(line),
            "docs/install.md does not show `{line}` (tests/k8s/install.rs runs it)"
        );
    }
}

#[test]
fn enable_nri_turns_nri_on_once_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let script = root().join("deploy/enable-nri.sh");
    let run = || {
        let out = std::process::Command::new("bash")
            .arg(&script)
            .args(["--config", config.to_str().unwrap(), "--no-restart"])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let original =
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"x\"\n";
    std::fs::write(&config, original).unwrap();
    let (ok, out) = run();
    assert!(ok && out.contains("NRI enabled"), "{out}");
    let after = std::fs::read_to_string(&config).unwrap();
    assert!(after.starts_with(original), "{after}");
    assert!(after.contains("[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("config.toml.before-nri")).unwrap(),
        original
    );
    // Again: nothing changes.
    let (ok, out) = run();
    assert!(ok && out.contains("already enabled"), "{out}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), after);
    // Explicitly disabled: turned on, the rest kept.
    std::fs::write(&config, after.replace("disable = false", "disable = true")).unwrap();
    let (ok, out) = run();
    assert!(ok && out.contains("was disabled"), "{out}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), after);
    // Another config version is not guessed at.
    std::fs::write(&config, "version = 3\n").unwrap();
    let (ok, out) = run();
    assert!(!ok && out.contains("by hand"), "{out}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "version = 3\n");
}

#[test]
fn the_examples_parse_and_the_mpijob_names_a_template_that_exists() {
    use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
    let aks = root().join("examples/azure_aks");
    let mut templates = Vec::new();
    for f in ["gb300/templates.yaml", "mi300x/templates.yaml"] {
        for d in read(&aks.join(f)) {
            let t: ResourceClaimTemplate =
                serde_json::from_value(d).unwrap_or_else(|e| panic!("{f}: {e}"));
            templates.push(t.metadata.name.unwrap_or_default());
        }
    }
    for d in read(&aks.join("deviceclasses.yaml")) {
        serde_json::from_value::<DeviceClass>(d).unwrap();
    }
    for job_file in ["gb300/mpi-job.yaml", "mi300x/mpi-job.yaml"] {
        let job = read(&aks.join(job_file));
        assert_eq!(job.len(), 1, "{job_file}");
        assert_eq!(job[0]["kind"], "MPIJob", "{job_file}");
        let worker = &job[0]["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"];
        let name = worker["resourceClaims"][0]["resourceClaimTemplateName"]
            .as_str()
            .unwrap();
        assert!(
            templates.iter().any(|t| t == name),
            "{job_file}: {name} not in {templates:?}"
        );
        // The worker's pod spec is a valid PodSpec and is not privileged.
        let spec: PodSpec = serde_json::from_value(worker.clone()).unwrap();
        let sc = spec.containers[0]
            .security_context
            .clone()
            .unwrap_or_default();
        assert_ne!(sc.privileged, Some(true), "{job_file}");
    }
    for want in [
        "1nic-aligned",
        "2nic-aligned",
        "1nic-unaligned",
        "ib-same-fabric",
        "4nic-same-numa",
        "4nic-cross-numa",
        "8nic-all",
    ] {
        assert!(
            templates.iter().any(|t| t == want),
            "{want} missing: {templates:?}"
        );
    }
}

/// The long flags of `dranet run --help`, each with its possible values (empty when it takes
/// any value): read from the daemon itself, so the chart tests below need no second list.
fn run_flags() -> Vec<(String, Vec<String>)> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dranet"))
        .args(["run", "--help"])
        .output()
        .expect("run dranet run --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout).to_string();
    let mut flags: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_values = false;
    for line in help.lines() {
        let t = line.trim();
        if let Some(flag) = t
            .strip_prefix("--")
            .filter(|_| line.starts_with("      --"))
        {
            let name = flag.split([' ', '=']).next().unwrap_or_default();
            flags.push((name.to_string(), Vec::new()));
            in_values = false;
        } else if t == "Possible values:" {
            in_values = true;
        } else if in_values && t.starts_with("- ") {
            let v = t[2..].split(':').next().unwrap_or_default().trim();
            if let Some((_, values)) = flags.last_mut() {
                values.push(v.to_string());
            }
        } else if t.is_empty() {
            in_values = false;
        }
    }
    flags
}

/// How each flag of `dranet run` is set from the chart: the `--set` that sets it to `{}` (the
/// value), or why the chart has no value for it.
enum Chart {
    Value(&'static str),
    Not(&'static str),
}

fn chart_of(flag: &str) -> Option<Chart> {
    use Chart::{Not, Value};
    Some(match flag {
        "log" => Value("log.level"),
        "log-format" => Value("log.format"),
        "move-ib-interfaces" => Value("moveIBInterfaces"),
        "uplink-interfaces" => Value("uplinkInterfaces"),
        "cloud-provider-hint" => Value("cloudProviderHint"),
        "azure-imds-endpoint" => Value("azureImdsEndpoint"),
        "azure-imds-api-version" => Value("azureImdsApiVersion"),
        "webhook-url" => Value("webhook.url"),
        "webhook-ca-file" => Value("webhook.caFile"),
        "webhook-timeout" => Value("webhook.timeout"),
        "provider-refresh-timeout" => Value("providerRefreshTimeout"),
        "slaac-ready-timeout" => Value("slaacReadyTimeout"),
        "profile-provider" => Value("profileProvider"),
        "bind-address" => Value("metrics.port"),
        "filter" => Value("filter"),
        "share-filter" => Value("share.filter"),
        "share-children" => Value("share.children"),
        "feature-gates" => Value("featureGates"),
        "kubelet-root-dir" => Value("kubeletRootDir"),
        "state-dir" => Value("stateDir"),
        "nri-socket" => Value("nriSocket"),
        "inventory-min-poll-interval" => Value("inventory.minPollInterval"),
        "inventory-max-poll-interval" => Value("inventory.maxPollInterval"),
        "inventory-poll-burst" => Value("inventory.pollBurst"),
        "hotplug" => Value("inventory.hotplug"),
        "nri-request-timeout" => Value("nriRequestTimeout"),
        "device-attach-timeout" => Value("deviceAttachTimeout"),
        "hook-path" => Value("hook.path"),
        "cdi-dir" => Value("cdiDir"),
        "enable-device-metadata" => Value("deviceMetadata.enabled"),
        "device-metadata-versions" => Value("deviceMetadata.versions"),
        "sysfs" => Not("the container's /sys is the host's: the default"),
        "pci-ids" => Not("pciIdsDir mounts the directory the daemon searches"),
        "kubeconfig" => Not("the pod's service account"),
        "node-name" => Not("NODE_NAME from the downward API"),
        "db-path" => Not("upstream's spelling of stateDir"),
        "fixture-sysfs"
        | "azure-imds-file"
        | "gce-metadata-file"
        | "aws-metadata-file"
        | "oke-metadata-file"
        | "alibaba-metadata-file"
        | "node-labels-file" => Not(
            "a file on the node, for trying the daemon without the hardware or the cloud: extraArgs and extraVolumes",
        ),
        "help" => Not("not a setting"),
        _ => return None,
    })
}

/// Every flag of `dranet run` has a chart value or a reason it has none: a flag added to the
/// daemon fails here until the chart has it.
#[test]
fn every_flag_of_the_daemon_is_a_chart_value_or_says_why_not() {
    let flags = run_flags();
    assert!(flags.len() >= 40, "{flags:?}");
    let missing: Vec<&str> = flags
        .iter()
        .map(|(f, _)| f.as_str())
        .filter(|f| match chart_of(f) {
            None => true,
            Some(Chart::Not(why)) => why.is_empty(),
            Some(Chart::Value(key)) => key.is_empty(),
        })
        .collect();
    assert!(
        missing.is_empty(),
        "flags of dranet run with no chart value: {missing:?}"
    );
    let Some(helm) = helm_or_skip("the daemon's flags in the chart") else {
        return;
    };
    // One rendering with a value for each: each reaches the daemon as its flag.
    let set: [(&str, &str, &str); 15] = [
        ("slaacReadyTimeout", "3s", "--slaac-ready-timeout=3s"),
        (
            "uplinkInterfaces",
            "{eth0,eth1}",
            "--uplink-interfaces=eth0,eth1",
        ),
        (
            "share.filter",
            r#"device.attributes["dra.net"].ifName == "eth1""#,
            r#"--share-filter=device.attributes["dra.net"].ifName == "eth1""#,
        ),
        ("share.children", "4", "--share-children=4"),
        (
            "featureGates",
            "DRAListTypeAttributes=true",
            "--feature-gates=DRAListTypeAttributes=true",
        ),
        (
            "azureImdsApiVersion",
            "2021-02-01",
            "--azure-imds-api-version=2021-02-01",
        ),
        (
            "providerRefreshTimeout",
            "1m",
            "--provider-refresh-timeout=1m",
        ),
        (
            "webhook.url",
            "http://127.0.0.1:8081",
            "--webhook-url=http://127.0.0.1:8081",
        ),
        (
            "webhook.caFile",
            "/etc/webhook/ca.pem",
            "--webhook-ca-file=/etc/webhook/ca.pem",
        ),
        ("webhook.timeout", "3s", "--webhook-timeout=3s"),
        ("inventory.hotplug", "false", "--hotplug=false"),
        (
            "inventory.minPollInterval",
            "500ms",
            "--inventory-min-poll-interval=500ms",
        ),
        (
            "inventory.maxPollInterval",
            "5m",
            "--inventory-max-poll-interval=5m",
        ),
        ("inventory.pollBurst", "3", "--inventory-poll-burst=3"),
        ("profileProvider", "webhook", "--profile-provider=webhook"),
    ];
    let mut args_of_set = Vec::new();
    for (k, v, _) in &set {
        args_of_set.push(if k.ends_with("filter") || k.starts_with("featureGates") {
            "--set-string".to_string()
        } else {
            "--set".to_string()
        });
        args_of_set.push(format!("{k}={v}"));
    }
    let refs: Vec<&str> = args_of_set.iter().map(String::as_str).collect();
    let args = pod_spec(&daemonset(&render(&helm, &refs))).containers[0]
        .args
        .clone()
        .unwrap_or_default();
    for (k, _, want) in &set {
        assert!(
            args.iter().any(|a| a == want),
            "{k}: {want} not in {args:?}"
        );
    }
    // What the daemon refuses, the schema refuses: a wrong type, a hint it does not know.
    for bad in [
        "webhook.timeout=3",
        "cloudProviderHint=gcp",
        "profileProvider=ipam",
        "share.children=0",
    ] {
        let out = template(&helm, &["--set", bad]);
        assert!(!out.status.success(), "{bad} was accepted");
    }
}

/// Every value of every enum flag of `dranet run` (read from its `--help`) that the chart sets
/// renders and reaches the daemon as the flag; case-insensitive ones in upper case too.
#[test]
fn every_value_of_every_enum_the_daemon_knows_renders() {
    let Some(helm) = helm_or_skip("the daemon's enums in the chart") else {
        return;
    };
    let mut checked = 0;
    for (flag, values) in run_flags() {
        let Some(Chart::Value(key)) = chart_of(&flag) else {
            continue;
        };
        for v in &values {
            let mut spellings = vec![v.clone()];
            if flag == "cloud-provider-hint" {
                spellings.push(v.to_uppercase());
            }
            for s in spellings {
                let args = pod_spec(&daemonset(&render(
                    &helm,
                    &["--set", &format!("{key}={s}")],
                )))
                .containers[0]
                    .args
                    .clone()
                    .unwrap_or_default();
                let want = format!("--{flag}={s}");
                assert!(args.contains(&want), "{key}={s}: {want} not in {args:?}");
                checked += 1;
            }
        }
    }
    // cloud-provider-hint (8, twice), profile-provider (3), log-format (2).
    assert!(checked >= 21, "{checked} values");
}
