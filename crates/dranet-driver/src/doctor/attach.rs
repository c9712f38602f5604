//! What a pod's attach can count on from the runtime: containerd's NRI request timeout, read
//! from its configuration, and whether the hook that holds a pod's containers is in place.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Finding, Status, finding};
use crate::attach::{AttachPolicy, DEFAULT_NRI_REQUEST_TIMEOUT};

/// containerd's NRI plugin section, in the 1.7 (version 2) and 2.x (version 3) formats alike.
const NRI_SECTION: &str = "io.containerd.nri.v1.nri";

/// The configuration files containerd reads by default.
pub const CONTAINERD_CONFIGS: [&str; 1] = ["/etc/containerd/config.toml"];

/// `plugin_request_timeout` of the NRI section of a containerd configuration: `Ok(None)` when
/// it is not set (containerd's default, 2 s, applies).
pub fn nri_request_timeout(config: &str) -> Result<Option<Duration>, String> {
    let mut in_nri = false;
    for (n, line) in config.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            in_nri = line.contains(NRI_SECTION);
            continue;
        }
        if !in_nri {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim() != "plugin_request_timeout" {
            continue;
        }
        let v = value.trim().trim_matches(['"', '\'']);
        return dranet_util::parse_duration(v)
            .map(Some)
            .map_err(|e| format!("line {}: plugin_request_timeout: {e}", n + 1));
    }
    Ok(None)
}

/// containerd's CDI spec directories when its configuration does not set them.
pub const DEFAULT_CDI_SPEC_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];

/// `cdi_spec_dirs` of a containerd configuration, if set.
pub fn cdi_spec_dirs(config: &str) -> Option<Vec<String>> {
    config.lines().find_map(|line| {
        let line = line.split('#').next().unwrap_or("").trim();
        let (key, value) = line.split_once('=')?;
        if key.trim() != "cdi_spec_dirs" {
            return None;
        }
        let list = value.trim().strip_prefix('[')?.strip_suffix(']')?;
        Some(
            list.split(',')
                .map(|d| d.trim().trim_matches(['"', '\'']).to_string())
                .filter(|d| !d.is_empty())
                .collect(),
        )
    })
}

/// What doctor knows of the runtime's deadline and the hook.
#[derive(Debug, Clone)]
pub struct AttachInput {
    /// containerd's configuration file and its text, when one was read.
    pub containerd_config: Option<(PathBuf, String)>,
    /// Where the hook should be on the host (`dranet run --hook-path`); `None`: not used.
    pub hook_path: Option<PathBuf>,
    /// Where the daemon writes the hook's CDI specs (`dranet run --cdi-dir`).
    pub cdi_dir: PathBuf,
    /// Whether the daemon writes device metadata CDI specs there too
    /// (`dranet run --enable-device-metadata`).
    pub device_metadata: bool,
    /// The running daemon's attach times (its metrics), or why they could not be read; `None`:
    /// not checked.
    pub times: Option<Result<super::attach_times::Sizes, String>>,
}

/// The findings: the timeout the daemon must be told, the hook, and what pods of each size
/// need here (of a node publishing `node_nics` NICs).
pub fn check(input: &AttachInput, node_nics: usize, out: &mut Vec<Finding>) {
    let (timeout, from) = match &input.containerd_config {
        Some((path, text)) => match nri_request_timeout(text) {
            Ok(Some(t)) => (t, format!("set in {}", path.display())),
            Ok(None) => (
                DEFAULT_NRI_REQUEST_TIMEOUT,
                format!("containerd's default: not set in {}", path.display()),
            ),
            Err(e) => {
                out.push(finding(
                    Status::Warn,
                    "runtime",
                    format!("{}: {e}", path.display()),
                    Some("fix plugin_request_timeout in the [plugins.\"io.containerd.nri.v1.nri\"] section"),
                ));
                return;
            }
        },
        None => (
            DEFAULT_NRI_REQUEST_TIMEOUT,
            "containerd's default: no configuration file read".to_string(),
        ),
    };
    let policy = AttachPolicy {
        nri_request_timeout: timeout,
        ..AttachPolicy::default()
    };
    let status = if timeout == DEFAULT_NRI_REQUEST_TIMEOUT {
        Status::Ok
    } else {
        Status::Warn
    };
    out.push(finding(
        status,
        "runtime",
        format!(
            "NRI request timeout {timeout:?} ({from}): the daemon answers within {:?}; a pod whose \
             NICs take longer (8-16 NICs under load, a slow DHCP server or webhook) is attached \
             after, its containers held until then",
            policy.answer_within()
        ),
        (status != Status::Ok).then_some(
            "run the daemon with --nri-request-timeout set to this (Helm: nriRequestTimeout)",
        ),
    ));
    if let Some(times) = &input.times {
        super::attach_times::check(
            &super::attach_times::TimesInput {
                metrics: times.clone(),
                answer_within: policy.answer_within(),
                hook: input.hook_path.as_ref().is_some_and(|h| h.is_file()),
                node_nics,
            },
            out,
        );
    }
    if input.hook_path.is_none() && !input.device_metadata {
        return;
    }
    // The runtime must read the specs the daemon writes: a CDI device it cannot resolve fails
    // the container.
    let dirs = input
        .containerd_config
        .as_ref()
        .and_then(|(_, t)| cdi_spec_dirs(t))
        .unwrap_or_else(|| DEFAULT_CDI_SPEC_DIRS.map(String::from).to_vec());
    let same = |d: &String| {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        canon(Path::new(d)) == canon(&input.cdi_dir)
    };
    if !dirs.iter().any(same) {
        out.push(finding(
            Status::Fail,
            "runtime",
            format!(
                "the daemon's CDI directory {} is not one the runtime reads ({}): with the hook \
                 or device metadata on, every container of a pod with a dra.net claim fails \
                 (unresolvable CDI device)",
                input.cdi_dir.display(),
                dirs.join(", ")
            ),
            Some("run the daemon with --cdi-dir set to one of the runtime's cdi_spec_dirs (Helm: cdiDir), or turn the hook and device metadata off"),
        ));
    }
    let Some(hook) = &input.hook_path else {
        return;
    };
    if hook.is_file() {
        out.push(finding(
            Status::Ok,
            "runtime",
            format!(
                "hook {} in place: a pod's first container waits for its NICs even when the \
                 daemon stalls or restarts as the pod starts",
                hook.display()
            ),
            None,
        ));
    } else {
        out.push(finding(
            Status::Warn,
            "runtime",
            format!(
                "no hook at {}: only CreateContainer holds a pod's containers until its NICs \
                 are in, which a daemon that stalls as the pod starts cannot do",
                hook.display()
            ),
            Some("install with the DaemonSet (Helm: hook.enabled) or run `dranet hook install --host-root / --path PATH`"),
        ));
    }
}

/// The first of `paths` that reads, with its text.
pub fn read_first(paths: &[&Path]) -> Option<(PathBuf, String)> {
    paths.iter().find_map(|p| {
        std::fs::read_to_string(p)
            .ok()
            .map(|t| (p.to_path_buf(), t))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_is_read_from_containerd_1_7_and_2_configs() {
        let v17 = "version = 2\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false\n  plugin_request_timeout = \"100ms\" # tight\n[plugins.other]\n  plugin_request_timeout = \"9s\"\n";
        assert_eq!(
            nri_request_timeout(v17),
            Ok(Some(Duration::from_millis(100)))
        );
        let v2 = "version = 3\n[plugins]\n  [plugins.'io.containerd.nri.v1.nri']\n    plugin_request_timeout = '5s'\n";
        assert_eq!(nri_request_timeout(v2), Ok(Some(Duration::from_secs(5))));
        let unset = "[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false\n[x]\nplugin_request_timeout = \"1s\"\n";
        assert_eq!(nri_request_timeout(unset), Ok(None));
        let bad = "[plugins.\"io.containerd.nri.v1.nri\"]\nplugin_request_timeout = \"soon\"\n";
        let e = nri_request_timeout(bad).unwrap_err();
        assert!(e.contains("line 2") && e.contains("soon"), "{e}");
    }

    #[test]
    fn a_cdi_directory_the_runtime_does_not_read_fails() {
        assert_eq!(
            cdi_spec_dirs("  cdi_spec_dirs = [\"/tmp/k/cdi\", '/etc/cdi']\n"),
            Some(vec!["/tmp/k/cdi".to_string(), "/etc/cdi".to_string()])
        );
        assert_eq!(cdi_spec_dirs("enable_cdi = true\n"), None);
        let input = |config: &str| AttachInput {
            containerd_config: Some(("/c.toml".into(), config.into())),
            hook_path: Some("/nonexistent/dranet".into()),
            cdi_dir: "/var/run/cdi".into(),
            device_metadata: false,
            times: None,
        };
        let mut out = Vec::new();
        check(
            &input("enable_cdi = true\ncdi_spec_dirs = [\"/tmp/k/cdi\"]\n"),
            0,
            &mut out,
        );
        assert!(
            out.iter()
                .any(|f| f.status == Status::Fail && f.message.contains("/tmp/k/cdi")),
            "{out:?}"
        );
        let mut out = Vec::new();
        check(&input("enable_cdi = true\n"), 0, &mut out);
        assert!(
            out.iter().all(|f| f.status != Status::Fail),
            "the defaults hold /var/run/cdi: {out:?}"
        );
        // Device metadata needs the directory without the hook too; neither: not checked.
        let only_metadata = |device_metadata| AttachInput {
            hook_path: None,
            device_metadata,
            ..input("cdi_spec_dirs = [\"/tmp/k/cdi\"]\n")
        };
        let mut out = Vec::new();
        check(&only_metadata(true), 0, &mut out);
        assert!(
            out.iter()
                .any(|f| f.status == Status::Fail && f.message.contains("device metadata")),
            "{out:?}"
        );
        let mut out = Vec::new();
        check(&only_metadata(false), 0, &mut out);
        assert!(out.iter().all(|f| f.status != Status::Fail), "{out:?}");
    }

    #[test]
    fn a_shorter_timeout_and_a_missing_hook_are_warnings_with_their_fix() {
        let mut out = Vec::new();
        check(
            &AttachInput {
                containerd_config: Some((
                    "/etc/containerd/config.toml".into(),
                    "[plugins.\"io.containerd.nri.v1.nri\"]\nplugin_request_timeout = \"100ms\"\n"
                        .into(),
                )),
                hook_path: Some("/nonexistent/dranet".into()),
                cdi_dir: "/var/run/cdi".into(),
                device_metadata: false,
                times: None,
            },
            0,
            &mut out,
        );
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].status, Status::Warn);
        assert!(
            out[0].message.contains("100ms") && out[0].message.contains("50ms"),
            "{:?}",
            out[0]
        );
        assert!(
            out[0]
                .fix
                .as_deref()
                .is_some_and(|f| f.contains("--nri-request-timeout"))
        );
        assert_eq!(out[1].status, Status::Warn);
        assert!(out[1].message.contains("no hook at /nonexistent/dranet"));

        let mut out = Vec::new();
        check(
            &AttachInput {
                containerd_config: None,
                hook_path: None,
                cdi_dir: "/var/run/cdi".into(),
                device_metadata: false,
                times: None,
            },
            0,
            &mut out,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].status, Status::Ok);
        assert!(out[0].message.contains("2s") && out[0].message.contains("1.5s"));
    }
}
