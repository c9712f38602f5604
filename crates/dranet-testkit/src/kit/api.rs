//! Reads of the kit's API server without kubectl. A test polls the cluster many times a second
//! while it waits; kubectl costs about 170 ms of a core per call on this machine (discovery,
//! a Go runtime's start), which a two-core machine then takes from the kubelet and the daemon
//! under test. curl with the kubeconfig's client certificate costs a tenth of that.

use std::path::PathBuf;
use std::process::Command;

/// The API server's address and the admin kubeconfig's credentials, written to files curl reads.
pub(crate) struct Api {
    server: String,
    dir: PathBuf,
}

impl Api {
    /// From `kubectl config view --raw` of the kit's kubeconfig (run with `env`); `None` when the
    /// kubeconfig is not the kit's kind (certificates embedded) or curl is missing, and kubectl
    /// then does the reads.
    pub(crate) fn new(kubectl: &mut Command) -> Option<Api> {
        Command::new("curl").arg("--version").output().ok()?;
        let out = kubectl
            .args(["config", "view", "--raw", "--minify", "-o", "json"])
            .output()
            .ok()?;
        let config: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let cluster = &config["clusters"][0]["cluster"];
        let user = &config["users"][0]["user"];
        let server = cluster["server"]
            .as_str()?
            .trim_end_matches('/')
            .to_string();
        let dir = std::env::temp_dir().join(format!("dranet-kit-api-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o700).create(&dir).ok()?;
        }
        let api = Api { server, dir };
        for (file, data) in [
            ("ca.crt", &cluster["certificate-authority-data"]),
            ("client.crt", &user["client-certificate-data"]),
            ("client.key", &user["client-key-data"]),
        ] {
            let pem = base64_decode(data.as_str()?)?;
            std::fs::write(api.dir.join(file), pem).ok()?;
        }
        Some(api)
    }

    /// GET `path` (from the server's root, e.g. `/api/v1/nodes`): the status and the body, or
    /// why curl gave neither.
    pub(crate) fn get(&self, path: &str) -> Result<(u16, String), String> {
        let file = |f: &str| self.dir.join(f);
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "30", "-w", "\n%{http_code}"])
            .arg("--cacert")
            .arg(file("ca.crt"))
            .arg("--cert")
            .arg(file("client.crt"))
            .arg("--key")
            .arg(file("client.key"))
            .arg(format!("{}{path}", self.server))
            .output()
            .map_err(|e| format!("curl: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        match code.trim().parse::<u16>() {
            Ok(code) if code != 0 => Ok((code, body.to_string())),
            _ => Err(format!(
                "curl {}{path}: {}",
                self.server,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    }

    /// The directory of the credentials (removed with the `Api`).
    #[cfg(test)]
    fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where a resource kind kubectl names (singular or plural) lives: its API prefix and whether it
/// is namespaced.
fn kind(name: &str) -> Option<(&'static str, &'static str, bool)> {
    const CORE: &str = "/api/v1";
    const APPS: &str = "/apis/apps/v1";
    const DRA: &str = "/apis/resource.k8s.io/v1";
    let kinds: [(&str, &str, &str, bool); 8] = [
        ("pod", "pods", CORE, true),
        ("node", "nodes", CORE, false),
        ("event", "events", CORE, true),
        ("daemonset", "daemonsets", APPS, true),
        ("resourceslice", "resourceslices", DRA, false),
        ("resourceclaim", "resourceclaims", DRA, true),
        ("resourceclaimtemplate", "resourceclaimtemplates", DRA, true),
        ("deviceclass", "deviceclasses", DRA, false),
    ];
    kinds
        .into_iter()
        .find(|(one, many, _, _)| name == *one || name == *many)
        .map(|(_, many, prefix, namespaced)| (prefix, many, namespaced))
}

/// The API path of `kubectl get ARGS -o json`, for the arguments this module understands
/// (`KIND [NAME] [-n NS] [-l SELECTOR] [-A]`); `None` for anything else, which kubectl then reads.
pub(crate) fn path_of(args: &[&str]) -> Option<String> {
    let (mut positional, mut namespace, mut selector, mut all) = (vec![], "default", None, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match *a {
            "-n" | "--namespace" => namespace = it.next()?,
            "-l" | "--selector" => selector = Some(*it.next()?),
            "-A" | "--all-namespaces" => all = true,
            a if a.starts_with('-') => return None,
            a => positional.push(a),
        }
    }
    let (prefix, plural, namespaced) = kind(positional.first()?)?;
    let name = match positional.len() {
        1 => None,
        2 => Some(positional[1]),
        _ => return None,
    };
    if all && name.is_some() {
        return None;
    }
    let mut path = prefix.to_string();
    if namespaced && !all {
        path += &format!("/namespaces/{namespace}");
    }
    path += &format!("/{plural}");
    if let Some(name) = name {
        path += &format!("/{name}");
    }
    if let Some(sel) = selector {
        path += &format!("?labelSelector={}", query_escape(sel));
    }
    Some(path)
}

/// `s` percent-encoded for a query value.
fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Standard base64 (a kubeconfig's `*-data`); `None` on a character outside the alphabet.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes: Vec<u8> = s
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= val(*c)? << (18 - 6 * i);
        }
        let take = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        out.extend_from_slice(&n.to_be_bytes()[1..1 + take]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_arguments_become_api_paths() {
        assert_eq!(
            path_of(&["pod", "p"]).as_deref(),
            Some("/api/v1/namespaces/default/pods/p")
        );
        assert_eq!(
            path_of(&[
                "pods",
                "-n",
                "dranet",
                "-l",
                "app.kubernetes.io/name=dranet"
            ])
            .as_deref(),
            Some("/api/v1/namespaces/dranet/pods?labelSelector=app.kubernetes.io%2Fname%3Ddranet")
        );
        assert_eq!(
            path_of(&["pods", "-A", "-l", "a=b"]).as_deref(),
            Some("/api/v1/pods?labelSelector=a%3Db")
        );
        assert_eq!(
            path_of(&["resourceslices"]).as_deref(),
            Some("/apis/resource.k8s.io/v1/resourceslices")
        );
        assert_eq!(
            path_of(&["daemonset", "-n", "dranet", "dranet"]).as_deref(),
            Some("/apis/apps/v1/namespaces/dranet/daemonsets/dranet")
        );
        assert_eq!(path_of(&["node", "n"]).as_deref(), Some("/api/v1/nodes/n"));
        // What this module does not know goes to kubectl.
        assert_eq!(path_of(&["validatingadmissionpolicy", "x"]), None);
        assert_eq!(path_of(&["pods,nodes"]), None);
        assert_eq!(path_of(&["pods", "--raw", "/x"]), None);
        assert_eq!(path_of(&["pod", "a", "b"]), None);
        assert_eq!(path_of(&["pod", "-n"]), None);
    }

    #[test]
    fn base64_decodes_padded_and_unpadded() {
        assert_eq!(base64_decode("aGVsbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(base64_decode("aGVsbG8").as_deref(), Some(&b"hello"[..]));
        assert_eq!(base64_decode("aGk=\n").as_deref(), Some(&b"hi"[..]));
        assert_eq!(base64_decode("YWJj").as_deref(), Some(&b"abc"[..]));
        assert_eq!(base64_decode("a!=="), None);
        assert_eq!(base64_decode("a"), None);
    }

    #[test]
    fn credentials_go_when_the_api_does() {
        let dir = std::env::temp_dir().join(format!("dranet-kit-api-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let api = Api {
            server: "https://127.0.0.1:1".into(),
            dir: dir.clone(),
        };
        assert!(api.dir().exists());
        drop(api);
        assert!(!dir.exists());
    }
}
