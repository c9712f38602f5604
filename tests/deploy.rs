//! `deploy/`: every manifest parses into its Kubernetes type, `install.yaml` is exactly the base
//! it is generated from, and the DaemonSet keeps the properties docs/security.md promises (not
//! privileged, its capabilities, its probes, the host paths the daemon uses).

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::resource::v1::DeviceClass;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents of a YAML stream, as JSON values (comments and empty documents dropped).
fn documents(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str_multiple::<serde_json::Value, Vec<_>>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// Parses `doc` as the type its `kind` names; unknown kinds fail.
fn parse_typed(doc: &serde_json::Value, file: &Path) {
    let kind = doc["kind"].as_str().unwrap_or_default();
    let r = match kind {
        "Namespace" => serde_json::from_value::<Namespace>(doc.clone()).map(|_| ()),
        "ServiceAccount" => serde_json::from_value::<ServiceAccount>(doc.clone()).map(|_| ()),
        "ClusterRole" => serde_json::from_value::<ClusterRole>(doc.clone()).map(|_| ()),
        "ClusterRoleBinding" => {
            serde_json::from_value::<ClusterRoleBinding>(doc.clone()).map(|_| ())
        }
        "DeviceClass" => serde_json::from_value::<DeviceClass>(doc.clone()).map(|_| ()),
        "DaemonSet" => serde_json::from_value::<DaemonSet>(doc.clone()).map(|_| ()),
        "Kustomization" => Ok(()),
        other => panic!("{}: unexpected kind {other:?}", file.display()),
    };
    if let Err(e) = r {
        panic!("{}: {kind}: {e}", file.display());
    }
}

#[test]
fn every_manifest_parses_into_its_kubernetes_type() {
    let mut n = 0;
    for dir in ["deploy", "deploy/base"] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "yaml") {
                for d in documents(&p) {
                    parse_typed(&d, &p);
                    n += 1;
                }
            }
        }
    }
    assert!(n >= 14, "{n} documents");
}

#[test]
fn install_yaml_is_the_base_joined() {
    let install = documents(&root().join("deploy/install.yaml"));
    let kustomization = documents(&root().join("deploy/base/kustomization.yaml"));
    let joined: Vec<serde_json::Value> = kustomization[0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| documents(&root().join("deploy/base").join(f.as_str().unwrap())))
        .collect();
    assert_eq!(
        install, joined,
        "deploy/install.yaml differs from deploy/base: run deploy/gen-install.sh"
    );
}

#[test]
fn the_daemonset_is_unprivileged_with_probes_and_its_host_paths() {
    let docs = documents(&root().join("deploy/install.yaml"));
    let ds: DaemonSet = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .map(|d| serde_json::from_value(d.clone()).unwrap())
        .expect("a DaemonSet");
    let pod = ds.spec.unwrap().template.spec.unwrap();
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
    let mounts: Vec<&str> = c
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.as_str())
        .collect();
    for want in [
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins",
        "/var/run/nri",
        "/var/run/netns",
        "/var/run/dranet",
    ] {
        assert!(mounts.contains(&want), "{want} not mounted: {mounts:?}");
    }
    // The DeviceClasses of upstream and of the AKS templates.
    let classes: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "DeviceClass")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    assert_eq!(classes, ["dranet", "dranet.net"]);
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
        for d in documents(&aks.join(f)) {
            let t: ResourceClaimTemplate =
                serde_json::from_value(d).unwrap_or_else(|e| panic!("{f}: {e}"));
            templates.push(t.metadata.name.unwrap_or_default());
        }
    }
    for d in documents(&aks.join("deviceclasses.yaml")) {
        serde_json::from_value::<DeviceClass>(d).unwrap();
    }
    for job_file in ["gb300/mpi-job.yaml", "mi300x/mpi-job.yaml"] {
        let job = documents(&aks.join(job_file));
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
        let spec: k8s_openapi::api::core::v1::PodSpec =
            serde_json::from_value(worker.clone()).unwrap();
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
