//! The install manifests and the Helm chart of `deploy/`: YAML streams read as JSON values, and the
//! helm binary that `.ci/helm.sh` installs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The chart.
pub fn chart() -> PathBuf {
    root().join("deploy/helm/dranet")
}

/// The kinds of the objects the chart makes with its default values (install.yaml adds the
/// Namespace).
pub const CHART_KINDS: [&str; 7] = [
    "ClusterRole",
    "ClusterRoleBinding",
    "DaemonSet",
    "DeviceClass",
    "ServiceAccount",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

/// The install guide's helm path (docs/install.md shows these lines), which tests/k8s/install.rs
/// runs from the repository's root: install (with the test's `-f VALUES` appended to the helm
/// line), then a change of value, then uninstall.
pub const GUIDE_HELM_INSTALL: [&str; 3] = [
    "kubectl create namespace dranet",
    "kubectl label namespace dranet pod-security.kubernetes.io/enforce=privileged",
    "helm install dranet deploy/helm/dranet --namespace dranet --wait --timeout=2m",
];
/// See [`GUIDE_HELM_INSTALL`].
pub const GUIDE_HELM_UPGRADE: &str = "helm upgrade dranet deploy/helm/dranet --namespace dranet --reuse-values --set log.level=debug --wait --timeout=2m";
/// See [`GUIDE_HELM_INSTALL`].
pub const GUIDE_HELM_UNINSTALL: [&str; 2] = [
    "helm uninstall dranet --namespace dranet --wait --timeout=2m",
    "kubectl delete namespace dranet",
];

/// The documents of a YAML stream, as JSON values (comments and empty documents dropped).
pub fn documents(text: &str) -> Vec<serde_json::Value> {
    serde_saphyr::from_str_multiple::<serde_json::Value, Vec<_>>(text)
        .unwrap_or_else(|e| panic!("YAML: {e}\n{text}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// helm: `$DRANET_HELM`, else where `.ci/helm.sh` caches it (as root, then as a user), else on
/// PATH.
pub fn helm() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("DRANET_HELM") {
        return Some(PathBuf::from(p));
    }
    let user_cache = std::env::var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|_| std::env::var("HOME").map(|h| Path::new(&h).join(".cache")))
        .map(|c| c.join("dranet-helm/helm"));
    [Ok(PathBuf::from("/var/cache/dranet-helm/helm")), user_cache]
        .into_iter()
        .flatten()
        .find(|p| p.exists())
        .or_else(|| {
            Command::new("helm")
                .arg("version")
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|_| PathBuf::from("helm"))
        })
}

/// `helm template dranet <chart> --namespace dranet ARGS` (ARGS: `-f FILE`, `--set ...`).
pub fn template(helm: &Path, args: &[&str]) -> Output {
    Command::new(helm)
        .args(["template", "dranet"])
        .arg(chart())
        .args(["--namespace", "dranet"])
        .args(args)
        .output()
        .expect("run helm")
}
