//! A provider's runtime hook: a program on the node the provider asks to have run once for each
//! pod that gets one of its devices, in the pod's network namespace, after the pod's devices
//! are in and before its first container runs (say, to program a switch port for the pod's
//! addresses, or to load a per-pod firewall). The profile provider answers it at prepare
//! (`POST /GetRuntimeHook` of the webhook); the driver runs it from its own OCI hook.

use serde::{Deserialize, Serialize};

/// How long a hook may run when the provider does not say.
pub const DEFAULT_TIMEOUT_SECONDS: u32 = 10;
/// The longest a hook may run: the pod's first container waits for it.
pub const MAX_TIMEOUT_SECONDS: u32 = 30;
/// The most arguments a hook may take.
pub const MAX_ARGS: usize = 64;
/// The most bytes of a hook's `data` (as compact JSON) and of each argument.
pub const MAX_DATA_BYTES: usize = 64 * 1024;
/// The most distinct hooks one pod may have run (its claims' devices together): the pod's first
/// container waits for them in turn.
pub const MAX_HOOKS_PER_POD: usize = 8;

/// What the provider asks to run (the webhook's `GetRuntimeHook` answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuntimeHook {
    /// The program, an absolute path on the node.
    pub path: String,
    /// Its arguments, after the program's own name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// How long it may run, in seconds (0: [`DEFAULT_TIMEOUT_SECONDS`]; at most
    /// [`MAX_TIMEOUT_SECONDS`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeout_seconds: u32,
    /// Anything the provider wants the program to have, given to it on its standard input as
    /// JSON (`null` when none).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl RuntimeHook {
    /// How long it may run.
    pub fn timeout(&self) -> std::time::Duration {
        let s = match self.timeout_seconds {
            0 => DEFAULT_TIMEOUT_SECONDS,
            s => s,
        };
        std::time::Duration::from_secs(u64::from(s))
    }

    /// Checks what a provider answered; the error names what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let path = std::path::Path::new(&self.path);
        if !path.is_absolute() {
            return Err(format!("path {:?} is not absolute", self.path));
        }
        if path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(format!("path {:?} has a '..' component", self.path));
        }
        if self.path.contains('\0') || self.args.iter().any(|a| a.contains('\0')) {
            return Err("a NUL byte in the path or an argument".into());
        }
        if self.args.len() > MAX_ARGS {
            return Err(format!(
                "{} arguments, more than {MAX_ARGS}",
                self.args.len()
            ));
        }
        if let Some(a) = self.args.iter().find(|a| a.len() > MAX_DATA_BYTES) {
            return Err(format!(
                "an argument of {} bytes, more than {MAX_DATA_BYTES}",
                a.len()
            ));
        }
        if self.timeout_seconds > MAX_TIMEOUT_SECONDS {
            return Err(format!(
                "timeoutSeconds {} is more than {MAX_TIMEOUT_SECONDS}: the pod's first container \
                 waits for the hook",
                self.timeout_seconds
            ));
        }
        let data = serde_json::to_vec(&self.data).map_err(|e| e.to_string())?;
        if data.len() > MAX_DATA_BYTES {
            return Err(format!(
                "data of {} bytes, more than {MAX_DATA_BYTES}",
                data.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(json: &str) -> RuntimeHook {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_provider_answer_is_read_and_checked() {
        let h = hook(
            r#"{"path":"/opt/p/hook","args":["--port","3"],"timeoutSeconds":5,"data":{"vlan":7}}"#,
        );
        assert_eq!(h.validate(), Ok(()));
        assert_eq!(h.timeout(), std::time::Duration::from_secs(5));
        assert_eq!(h.data["vlan"], 7);
        let h = hook(r#"{"path":"/opt/p/hook"}"#);
        assert_eq!(h.timeout(), std::time::Duration::from_secs(10));
        assert!(h.data.is_null());
        assert_eq!(
            serde_json::to_string(&h).unwrap(),
            r#"{"path":"/opt/p/hook"}"#
        );
    }

    #[test]
    fn what_is_wrong_is_named() {
        let bad = |json: &str, says: &str| {
            let e = hook(json).validate().unwrap_err();
            assert!(e.contains(says), "{json}: {e}");
        };
        bad(r#"{"path":"hook"}"#, "not absolute");
        bad(r#"{"path":"/opt/../bin/sh"}"#, "'..'");
        bad(r#"{"path":"/h","timeoutSeconds":31}"#, "more than 30");
        bad(r#"{"path":"/h","args":["a\u0000b"]}"#, "NUL");
        let many: Vec<String> = (0..65).map(|i| format!("\"{i}\"")).collect();
        bad(
            &format!(r#"{{"path":"/h","args":[{}]}}"#, many.join(",")),
            "65 arguments",
        );
        let big = "x".repeat(MAX_DATA_BYTES);
        bad(&format!(r#"{{"path":"/h","data":"{big}"}}"#), "data of");
        // A field this version does not know is refused, not ignored.
        let e = serde_json::from_str::<RuntimeHook>(r#"{"path":"/h","env":["A=1"]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `env`"), "{e}");
    }
}
