//! The API objects every real-cluster scenario writes alike, as YAML documents (each starting
//! with a newline, so that `---` joins them): a DeviceClass and the head of a claim template.

/// A DeviceClass `name` that selects every device of `driver`.
pub fn device_class(name: &str, driver: &str) -> String {
    format!(
        r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: {name}}}
spec:
  selectors:
  - cel: {{expression: 'device.driver == "{driver}"'}}
"#
    )
}

/// A ResourceClaimTemplate `name` in `default` whose claims' `devices` are `devices` (YAML at
/// that depth: `      requests:`…, ending with a newline).
pub fn claim_template(name: &str, devices: &str) -> String {
    format!(
        r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}, namespace: default}}
spec:
  spec:
    devices:
{devices}"#
    )
}
