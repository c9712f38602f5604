//! Where the metadata files and their CDI specs are, and what the CDI devices are called.

use std::path::{Path, PathBuf};

/// The directory in the container under which each claim's metadata appears.
pub const CONTAINER_DIR: &str = "/var/run/kubernetes.io/dra-device-attributes";

/// The subdirectory of [`CONTAINER_DIR`] for claims the pod names directly
/// (`spec.resourceClaims[].resourceClaimName`), by claim name.
pub const RESOURCE_CLAIMS_SUBDIR: &str = "resourceclaims";

/// The subdirectory of [`CONTAINER_DIR`] for claims generated from a template, by the pod's name
/// for the claim (`spec.resourceClaims[].name`): the generated claim's name is random, so a pod
/// spec could not name the path otherwise.
pub const RESOURCE_CLAIM_TEMPLATES_SUBDIR: &str = "resourceclaimtemplates";

/// The annotation the resourceclaim controller puts on a claim it generates from a template:
/// the pod's name for the claim. A claim without it is one the pod names directly.
pub const POD_CLAIM_NAME_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";

/// The directory under the driver's plugin directory that holds the files.
const HOST_SUBDIR: &str = "dra-device-metadata";

/// The file in each request's directory on the host.
const FILE_NAME: &str = "metadata.json";

/// The request a container names for a claim's request: `nic` for the `firstAvailable`
/// subrequest `nic/fast`, the request itself otherwise.
pub fn top_request(request: &str) -> &str {
    request.split_once('/').map_or(request, |(top, _)| top)
}

/// The paths and names of one driver's device metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataLayout {
    /// `<kubelet root>/plugins/<driver>/dra-device-metadata`.
    root: PathBuf,
    cdi_dir: PathBuf,
    driver: String,
}

impl MetadataLayout {
    /// The layout of `driver` under the kubelet's root directory, its CDI specs in `cdi_dir`.
    pub fn new(kubelet_root_dir: &Path, driver: &str, cdi_dir: &Path) -> Self {
        Self {
            root: kubelet_root_dir
                .join("plugins")
                .join(driver)
                .join(HOST_SUBDIR),
            cdi_dir: cdi_dir.to_path_buf(),
            driver: driver.to_string(),
        }
    }

    /// The directory holding every claim's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The CDI spec directory.
    pub fn cdi_dir(&self) -> &Path {
        &self.cdi_dir
    }

    /// The driver's name.
    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// The host directory of a claim: `<root>/<namespace>_<name>`.
    pub fn claim_dir(&self, namespace: &str, name: &str) -> PathBuf {
        self.root.join(claim_dir_name(namespace, name))
    }

    /// The host file of a claim's request (a subrequest's is its request's).
    pub fn file(&self, namespace: &str, name: &str, request: &str) -> PathBuf {
        self.claim_dir(namespace, name)
            .join(top_request(request))
            .join(FILE_NAME)
    }

    /// Where the containers see a claim's request's file: under
    /// `resourceclaimtemplates/<pod claim name>` for a claim generated from a template (its
    /// `pod_claim_name`), under `resourceclaims/<name>` for a claim the pod names directly.
    pub fn container_path(
        &self,
        name: &str,
        pod_claim_name: Option<&str>,
        request: &str,
    ) -> String {
        let (subdir, dir) = match pod_claim_name {
            Some(p) => (RESOURCE_CLAIM_TEMPLATES_SUBDIR, p),
            None => (RESOURCE_CLAIMS_SUBDIR, name),
        };
        format!(
            "{CONTAINER_DIR}/{subdir}/{dir}/{}/{}-metadata.json",
            top_request(request),
            self.driver
        )
    }

    /// The CDI kind of the metadata devices: `<driver>/metadata`.
    pub fn cdi_kind(&self) -> String {
        format!("{}/metadata", self.driver)
    }

    /// The CDI device name of a claim's request: `<claim UID>_<request>`.
    pub fn cdi_device_name(&self, claim_uid: &str, request: &str) -> String {
        format!("{claim_uid}_{}", top_request(request))
    }

    /// The fully qualified CDI ID of a claim's request: `<driver>/metadata=<claim UID>_<request>`.
    pub fn cdi_id(&self, claim_uid: &str, request: &str) -> String {
        format!(
            "{}={}",
            self.cdi_kind(),
            self.cdi_device_name(claim_uid, request)
        )
    }

    /// The CDI spec file of a claim's request: `<driver>-metadata.<claim UID>.<request>.json`.
    /// Dots separate the parts (neither a UID nor a request name has one), and the name has
    /// no `_`, which every [`crate::cdi::CdiWriter`] spec name has: no driver spec is named so.
    pub fn spec_path(&self, claim_uid: &str, request: &str) -> PathBuf {
        self.cdi_dir.join(format!(
            "{}{claim_uid}.{}.json",
            self.spec_prefix(),
            top_request(request)
        ))
    }

    /// What every spec file name of this driver's metadata starts with.
    fn spec_prefix(&self) -> String {
        format!("{}-metadata.", self.driver)
    }

    /// The claim UID and request of a spec file name of this layout.
    pub(crate) fn parse_spec_name(&self, file_name: &str) -> Option<(String, String)> {
        let rest = file_name
            .strip_prefix(&self.spec_prefix())?
            .strip_suffix(".json")?;
        let (uid, request) = rest.split_once('.')?;
        (check_uid(uid).is_ok() && check_request(request).is_ok())
            .then(|| (uid.to_string(), request.to_string()))
    }
}

/// The name of a claim's directory. Namespaces and names are DNS labels and subdomains (the
/// plugin checks them), so `_` separates them without ambiguity.
pub(crate) fn claim_dir_name(namespace: &str, name: &str) -> String {
    format!("{namespace}_{name}")
}

/// A claim UID as it goes into file and CDI device names: a UUID's characters only.
pub(crate) fn check_uid(uid: &str) -> Result<(), String> {
    let ok = !uid.is_empty()
        && uid.len() <= 128
        && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "claim UID {uid:?} cannot name device metadata (letters, digits and '-' only)"
        ))
    }
}

/// A pod's name for a claim as it goes into the container path: a DNS label, as the API server
/// requires of `spec.resourceClaims[].name` (the annotation could be edited by hand).
pub(crate) fn check_pod_claim_name(name: &str) -> Result<(), String> {
    if is_dns_label(name) {
        Ok(())
    } else {
        Err(format!(
            "annotation {POD_CLAIM_NAME_ANNOTATION}={name:?} cannot name device metadata (a DNS label is needed)"
        ))
    }
}

/// Lowercase letters, digits and inner '-', at most 63 characters.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A request name as it goes into paths and CDI device names: a DNS label, as the API server
/// requires of request names (a subrequest's request is checked).
pub(crate) fn check_request(request: &str) -> Result<(), String> {
    if is_dns_label(top_request(request)) {
        Ok(())
    } else {
        Err(format!(
            "request {request:?} cannot name device metadata (a DNS label is needed)"
        ))
    }
}
