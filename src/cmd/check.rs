//! `dranet check`: which devices a claim would get on a node, and how its GPUs and NICs relate.
//!
//! Runs the allocation the scheduler would ([`dranet_alloc`]) over the node's
//! ResourceSlices: dranet's own from `--sysfs` (discovered like `dranet inventory` does) and/or
//! any driver's from `--slices` files (`kubectl get resourceslices -o yaml`). Then, for every GPU
//! × NIC pair of the allocation, the topology relation: exact (PIX/PXB/PHB/NODE/SYS) when the
//! host tree is read with `--sysfs`, else from the standard attributes (same
//! `resource.kubernetes.io/pcieRoot` ⇒ PHB or closer, same NUMA node ⇒ NODE, else SYS). A GPU
//! with no NIC of the claim on its NUMA node is warned about: that is the pairing that cost the
//! seeds' users half their NCCL bandwidth.
//!
//! The report itself is [`dranet_alloc::report`]'s, so an embedder gets the same one; this file
//! holds the flags, the loading of files and sysfs, and the printing. It depends only on
//! library crates so it can be tested on its own.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use dranet_alloc::report::{self, Claim, ClaimReport, Host, Input, Note, ReadSlice, Report};
use dranet_alloc::served::{claim_spec_to_v1, slice_to_v1};
use dranet_alloc::{AllocError, Allocator};
use dranet_core::{Discover, Relation};
use dranet_kubeletplugin::api::{KubeClient, ListLimits};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimSpec, ResourceSlice};
// The root package reaches serde through k8s-openapi's re-export (it has no direct serde dep).
use k8s_openapi::serde::Serialize;

mod many;
mod measured;
mod verdict;

pub use verdict::{FailOn, verdict_error};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckFormat {
    /// Human-readable tables.
    Table,
    /// One JSON document with every claim's report.
    Json,
}

/// Arguments of `dranet check`.
#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    /// YAML file with ResourceClaimTemplates and/or ResourceClaims (several documents or a
    /// `kind: List` are fine: each claim is checked); `-` reads standard input.
    #[arg(value_name = "CLAIM.yaml")]
    pub claim: PathBuf,
    /// Only check the claim or template with this name.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Discover dranet's devices (and the GPUs, for exact topology) from this sysfs tree: the
    /// host's `/sys` or a fixture's `sys` directory.
    #[arg(long, value_name = "DIR")]
    pub sysfs: Option<PathBuf>,
    /// ResourceSlices of the node (any driver), e.g. `kubectl get resourceslices -o yaml`.
    /// Repeatable; may be combined with `--sysfs` for the other drivers' devices.
    #[arg(long = "slices", value_name = "SLICES.yaml")]
    pub slices: Vec<PathBuf>,
    /// DeviceClasses (repeatable). Without it, each driver gets a class named after it, and
    /// `dranet.net` selects driver `dra.net`.
    #[arg(long = "classes", value_name = "CLASSES.yaml")]
    pub classes: Vec<PathBuf>,
    /// The node to check (default: every node the slices name, each on its own, as the scheduler
    /// allocates a claim from one node). With `--sysfs`, the tree is this node (default:
    /// $NODE_NAME, else the one node the slices name, else the hostname), and that node's
    /// `dra.net` slices in `--slices` are replaced by what the tree shows: one device, one
    /// identity.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// Deprecated spelling of `--node` (it named the node of the `--sysfs` tree, which is the
    /// node checked).
    #[arg(long, value_name = "NODE", hide = true, conflicts_with = "node")]
    pub node_name: Option<String>,
    /// Read the ResourceSlices and DeviceClasses of the cluster this kubeconfig names (its
    /// current context) instead of files, and check each of its nodes. The claim still comes
    /// from CLAIM.yaml; classes in `--classes` or beside the claim override the cluster's of the
    /// same name.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["slices", "from_cluster"])]
    pub kubeconfig: Option<PathBuf>,
    /// Like `--kubeconfig`, with the default credentials: the in-cluster service account, else
    /// $KUBECONFIG or ~/.kube/config.
    #[arg(long, conflicts_with = "slices")]
    pub from_cluster: bool,
    /// The most JSON, in MiB, read of the cluster's ResourceSlices with `--kubeconfig` or
    /// `--from-cluster` (all pages together); more is an error naming this flag. The slices
    /// held take about twice their JSON.
    #[arg(long, value_name = "MiB", default_value_t = MAX_CLUSTER_SLICES_MIB)]
    pub max_cluster_slices_mib: u64,
    /// Answer as the scheduler of this Kubernetes version does (its default feature gates, its
    /// allocator, its CEL environment): 1.34, 1.35, 1.36 or 1.37. Default: with `--kubeconfig`
    /// or `--from-cluster` the API server's version, else the newest supported (1.37).
    #[arg(long, value_name = "VERSION")]
    pub kubernetes_version: Option<dranet_alloc::KubernetesVersion>,
    /// Also fail (exit 4) when a claim fits only unaligned: a GPU with no NIC of the claim on
    /// its NUMA node.
    #[arg(long, value_enum, value_name = "LEVEL", default_value_t = FailOn::Error)]
    pub fail_on: FailOn,
    /// Allocate each claim (template) for N pods on each node, one after another, as N pods
    /// each with their own claim from it: each sees what the earlier ones hold, and the claim
    /// fits only when all N do (1 to 1024).
    #[arg(long, value_name = "N", default_value = "1")]
    pub pods: report::Pods,
    /// Cloud provider attributes for the devices discovered with `--sysfs` (as `inventory`).
    #[command(flatten)]
    pub cloud: super::CloudArgs,
    /// What the daemon publishes from the `--sysfs` tree: its `--filter`, sharing and gates.
    #[command(flatten)]
    pub publish: super::PublishArgs,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = CheckFormat::Table)]
    pub output: CheckFormat,
}

impl CheckArgs {
    /// Whether the slices and classes come from a cluster.
    fn cluster(&self) -> bool {
        self.kubeconfig.is_some() || self.from_cluster
    }

    /// `--node`, or its deprecated spelling `--node-name`.
    fn node(&self) -> Option<&String> {
        self.node.as_ref().or(self.node_name.as_ref())
    }

    /// The flag the node came from, for messages.
    fn node_flag(&self) -> &'static str {
        if self.node.is_none() && self.node_name.is_some() {
            "--node-name"
        } else {
            "--node"
        }
    }
}

/// The default of `--max-cluster-slices-mib`: 256 MiB of ResourceSlice JSON, over 3 times the
/// 79 MB of 5,000 GB300 nodes (two slices each, 16 kB a node), and some 500 slices of the API
/// server's largest (3 MiB each for 128 devices with maximal attributes).
pub const MAX_CLUSTER_SLICES_MIB: u64 = 256;

/// What `dranet check` can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// Documents that are not what they should be: every one of every file, each with its
    /// place (file, document, field path, line and column).
    #[error("{0}")]
    Input(super::load::InputErrors),
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
    /// The devices could not be assembled.
    #[error("{0}")]
    Devices(#[from] AllocError),
    /// The cluster could not be read (`--kubeconfig`, `--from-cluster`).
    #[error("{flag}: {reason}")]
    Cluster {
        /// The flag, with its file.
        flag: String,
        /// Why.
        reason: String,
    },
    /// The cluster's ResourceSlices are more than `--max-cluster-slices-mib` of JSON.
    #[error(
        "{flag}: {source} (--max-cluster-slices-mib {limit_mib}); raise the limit to check this \
         cluster"
    )]
    ClusterTooLarge {
        /// The flag, with its file.
        flag: String,
        /// The limit, in MiB.
        limit_mib: u64,
        /// The listing's error ([`dranet_kubeletplugin::Error::TooLarge`]).
        #[source]
        source: Box<dranet_kubeletplugin::Error>,
    },
    /// Discovery of `--sysfs` failed.
    #[error("--sysfs {path}: {reason}")]
    Discovery {
        /// The tree.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The claims were checked and the verdict is a failure (the report was printed).
    #[error("{message}")]
    Verdict {
        /// The exit code (see [`verdict::exit`]).
        code: u8,
        /// Which claims, in one line.
        message: String,
    },
    /// Writing the report failed.
    #[error("output: {0}")]
    Output(String),
}

/// The allocator's complaint about a slice (`device nic0: attribute dra.net/fw: invalid
/// semver`), at the field it names when it names one.
fn slice_error(d: &super::load::Doc, reason: &str) -> super::load::InputError {
    let devices = d.value["spec"]["devices"].as_array().map(Vec::as_slice);
    let found = devices
        .unwrap_or_default()
        .iter()
        .enumerate()
        .find_map(|(i, dev)| {
            let rest = reason.strip_prefix(&format!("device {}: ", dev["name"].as_str()?))?;
            let field = format!("spec.devices[{i}]");
            for (word, key) in [("attribute", "attributes"), ("capacity", "capacity")] {
                let Some(after) = rest.strip_prefix(&format!("{word} ")) else {
                    continue;
                };
                let names = dev[key].as_object().into_iter().flat_map(|m| m.keys());
                for name in names {
                    if let Some(why) = after.strip_prefix(&format!("{name}: ")) {
                        return Some((format!("{field}.{key}.{name}"), why.to_string()));
                    }
                }
            }
            Some((field, rest.to_string()))
        });
    match found {
        Some((field, why)) => d.error(&field, why),
        None => d.error("", reason),
    }
}

/// What is wrong with a ResourceSlice document (in the v1 shape), every error at its field.
/// Slices are what a (maybe newer) API server returns: types are checked, fields this build
/// does not know are not errors. What the allocator refuses (a bad semver, quantity or
/// counter) is an input error of the document too, reported with the others.
fn check_slice(d: &super::load::Doc) -> Result<ResourceSlice, Vec<super::load::InputError>> {
    let typed: ResourceSlice = d.decode("", &d.value, false)?;
    let built = Allocator::with_json(
        std::slice::from_ref(&typed),
        std::slice::from_ref(&d.value),
        &[],
        &dranet_alloc::Options::default(),
    );
    match built {
        Ok(_) => Ok(typed),
        Err(AllocError::InvalidSlice { reason, .. }) => Err(vec![slice_error(d, &reason)]),
        Err(e) => Err(vec![d.error("", e.to_string())]),
    }
}

/// A document of a kind that does not belong in this file.
fn wrong_kind(d: &super::load::Doc, expected: &str) -> super::load::InputError {
    match d.kind() {
        "" => d.error(
            "",
            format!("no kind: not a Kubernetes object (expected {expected})"),
        ),
        k => d.error("kind", format!("kind {k} is not {expected}")),
    }
}

/// A DeviceClass document, strictly decoded, into `classes` or its errors into `errors`.
fn read_class(
    d: &super::load::Doc,
    classes: &mut Vec<DeviceClass>,
    errors: &mut Vec<super::load::InputError>,
) {
    match d.decode("", &d.value, true) {
        Ok(c) => classes.push(c),
        Err(e) => errors.extend(e),
    }
}

/// The node of a sysfs tree: dranet's ResourceSlices, and the inventory for exact topology.
///
/// The same discovery and publication `dranet inventory` and the daemon run, cloud provider
/// and `--filter`, `--share-filter` and `--feature-gates` included.
fn discover(sysfs: &Path, node: &str, args: &CheckArgs) -> Result<Host, CheckError> {
    super::check_sysfs(sysfs).map_err(CheckError::Usage)?;
    let policy = args
        .publish
        .policy()
        .map_err(|e| CheckError::Usage(e.to_string()))?;
    let inv = dranet_discovery::host(sysfs, dranet_discovery::Options::default())
        .discover()
        .map_err(|e| CheckError::Discovery {
            path: sysfs.to_path_buf(),
            reason: e.to_string(),
        })?;
    let cloud = args
        .cloud
        .provider(sysfs, &inv)
        .map_err(|e| CheckError::Usage(e.to_string()))?;
    let published = super::publication_of(&inv, cloud.as_ref(), &policy);
    Ok(Host {
        node: node.to_string(),
        slices: published.resource_slices(node),
        inventory: inv,
    })
}

/// The objects of `--classes` files that are not DeviceClasses (a Pod, a template beside them,
/// as a file for `kubectl apply` holds): `file: Kind name`, skipped.
type Skipped = Vec<String>;

/// Runs the check and returns the report, naming in `skipped` what `--classes` files held
/// besides DeviceClasses; errors are about inputs, not about claims that cannot be allocated
/// (those are in each [`ClaimReport::error`]).
fn check_skipping(args: &CheckArgs, skipped: &mut Skipped) -> Result<Report, CheckError> {
    let cluster = args.cluster();
    if args.sysfs.is_none() && args.slices.is_empty() && !cluster {
        return Err(CheckError::Usage(
            "give the node's devices with --sysfs DIR and/or --slices SLICES.yaml, or read a \
             cluster's with --kubeconfig FILE or --from-cluster"
                .into(),
        ));
    }
    // Every document of every file is read and every bad one reported before anything is
    // checked (or a cluster asked): an answer computed without a bad slice or class would be
    // about other devices.
    let mut errors = Vec::new();
    let mut file_slices = Vec::new();
    let mut classes = Vec::new();
    let mut taint_rules = Vec::new();
    for path in &args.slices {
        for mut d in super::load::documents(path, &mut errors) {
            match d.kind() {
                "ResourceSlice" => {
                    if let Err(e) = slice_to_v1(&mut d.value) {
                        errors.push(d.error("apiVersion", e.to_string()));
                        continue;
                    }
                    match check_slice(&d) {
                        Ok(typed) => file_slices.push(ReadSlice::new(typed, &d.value)),
                        Err(e) => errors.extend(e),
                    }
                }
                "DeviceClass" => read_class(&d, &mut classes, &mut errors),
                "DeviceTaintRule" => {
                    match dranet_alloc::DeviceTaintRule::from_json(taint_rules.len(), &d.value) {
                        Ok(r) => taint_rules.push(r),
                        Err(e) => errors.push(d.error("spec", e.to_string())),
                    }
                }
                _ => errors.push(wrong_kind(
                    &d,
                    "ResourceSlice, DeviceClass or DeviceTaintRule",
                )),
            }
        }
    }
    for path in &args.classes {
        for d in super::load::documents(path, &mut errors) {
            match d.kind() {
                "DeviceClass" => read_class(&d, &mut classes, &mut errors),
                // Not a Kubernetes object at all: a wrong file, not one to skip.
                "" => errors.push(wrong_kind(&d, "DeviceClass")),
                kind => skipped.push(format!("{}: {kind} {}", path.display(), d.name())),
            }
        }
    }
    let claims = read_claims(args, &mut classes, &mut errors);
    if !errors.is_empty() {
        return Err(CheckError::Input(super::load::InputErrors(errors)));
    }
    if claims.is_empty() {
        return Err(CheckError::Usage(match &args.name {
            Some(n) => format!("{}: no claim or template named {n:?}", args.claim.display()),
            None => format!(
                "{}: no ResourceClaim or ResourceClaimTemplate",
                args.claim.display()
            ),
        }));
    }
    let mut input = Input::default();
    let mut cluster_classes = None;
    if cluster {
        let cluster = read_cluster(args)?;
        input.slices = cluster.slices;
        cluster_classes = Some(cluster.classes);
        input.version = cluster.version;
        input.taint_rules = cluster.taint_rules;
    }
    input.taint_rules.extend(taint_rules);
    if let Some(v) = args.kubernetes_version {
        input.version = v;
    }
    input.pods = args.pods;
    input.slices.extend(file_slices);
    let slice_nodes = report::slice_nodes(&input.slices);
    if let Some(sysfs) = &args.sysfs {
        let node = sysfs_node_name(args, &slice_nodes)?;
        input.host = Some(discover(sysfs, &node, args)?);
    }
    input.classes = match cluster_classes {
        // The cluster's classes, those of the files overriding the ones of the same name.
        Some(mut from_cluster) => {
            from_cluster.retain(|c| !classes.iter().any(|f| f.metadata.name == c.metadata.name));
            from_cluster.extend(classes);
            Some(from_cluster)
        }
        None if classes.is_empty() => None,
        None => Some(classes),
    };
    if let Some(n) = args.node() {
        let nodes = input.nodes();
        if !nodes.is_empty() && !nodes.contains(n) {
            // A cluster's thousand names would bury the message: the first few, and how many.
            const NAMED: usize = 10;
            let named: Vec<String> = nodes.iter().take(NAMED).cloned().collect();
            let more = match nodes.len().saturating_sub(NAMED) {
                0 => String::new(),
                m => format!(", … {m} more"),
            };
            return Err(CheckError::Usage(format!(
                "{} {n}: no slice is on that node (nodes: {}{more})",
                args.node_flag(),
                named.join(", ")
            )));
        }
        input.node = Some(n.clone());
    }
    let mut report = report::check(input, &claims)?;
    measured::add_costs(&mut report);
    Ok(report)
}

/// What `check` reads of a cluster.
struct Cluster {
    slices: Vec<ReadSlice>,
    classes: Vec<DeviceClass>,
    /// Read only without `--kubernetes-version`.
    version: dranet_alloc::KubernetesVersion,
    /// Those it serves (none when its `DRADeviceTaintRules` gate is off).
    taint_rules: Vec<dranet_alloc::DeviceTaintRule>,
}

/// The ResourceSlices, DeviceClasses, DeviceTaintRules and Kubernetes version of the cluster
/// of `--kubeconfig` or `--from-cluster`.
fn read_cluster(args: &CheckArgs) -> Result<Cluster, CheckError> {
    let flag = match &args.kubeconfig {
        Some(p) => format!("--kubeconfig {}", p.display()),
        None => "--from-cluster".to_string(),
    };
    let failed = |e: &dyn std::fmt::Display| CheckError::Cluster {
        flag: flag.clone(),
        reason: e.to_string(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| failed(&e))?;
    rt.block_on(async {
        let api = match &args.kubeconfig {
            Some(p) => KubeClient::from_kubeconfig(p).await,
            None => KubeClient::infer().await,
        }
        .map_err(|e| failed(&e))?;
        let version = match args.kubernetes_version {
            Some(v) => v,
            None => {
                let (major, minor) = api.server_version().await.map_err(|e| failed(&e))?;
                dranet_alloc::KubernetesVersion::from_server(&major, &minor).map_err(|e| {
                    failed(&format!(
                        "{e}; pass --kubernetes-version to answer as a supported version"
                    ))
                })?
            }
        };
        let slices = read_cluster_slices(&api, &flag, args.max_cluster_slices_mib).await?;
        let classes = api.list_device_classes().await.map_err(|e| failed(&e))?;
        let taint_rules = api
            .list_device_taint_rules()
            .await
            .map_err(|e| failed(&e))?
            .iter()
            .enumerate()
            .map(|(i, r)| dranet_alloc::DeviceTaintRule::from_json(i, r))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| failed(&e))?;
        Ok(Cluster {
            slices,
            classes,
            version,
            taint_rules,
        })
    })
}

/// The cluster's ResourceSlices, each decoded as its page arrives ([`ReadSlice::from_json`]:
/// any served version, only what `check` reads kept), at most `max_mib` MiB of JSON in all.
async fn read_cluster_slices(
    api: &KubeClient,
    flag: &str,
    max_mib: u64,
) -> Result<Vec<ReadSlice>, CheckError> {
    let limits = ListLimits {
        page_bytes: ListLimits::PAGE_BYTES,
        total_bytes: max_mib.saturating_mul(1 << 20),
    };
    let mut slices = Vec::new();
    let mut bad = None;
    let listed = api
        .for_each_slice(limits, |json| {
            match ReadSlice::from_json(slices.len(), json) {
                Ok(s) => slices.push(s),
                Err(e) => {
                    bad = Some(e);
                    return std::ops::ControlFlow::Break(());
                }
            }
            std::ops::ControlFlow::Continue(())
        })
        .await;
    let cluster = |reason: String| CheckError::Cluster {
        flag: flag.to_string(),
        reason,
    };
    if let Some(e) = bad {
        return Err(cluster(e.to_string()));
    }
    match listed {
        Ok(_) => Ok(slices),
        Err(
            source @ dranet_kubeletplugin::Error::TooLarge {
                what: "the list", ..
            },
        ) => Err(CheckError::ClusterTooLarge {
            flag: flag.to_string(),
            limit_mib: max_mib,
            source: Box::new(source),
        }),
        Err(e) => Err(cluster(e.to_string())),
    }
}

/// The claims and templates of the claim file (`--name` only); DeviceClasses beside them join
/// `classes`, bad documents `errors`.
fn read_claims(
    args: &CheckArgs,
    classes: &mut Vec<DeviceClass>,
    errors: &mut Vec<super::load::InputError>,
) -> Vec<Claim> {
    let mut claims = Vec::new();
    for d in super::load::documents(&args.claim, errors) {
        let (at, spec_value) = match d.kind() {
            "ResourceClaimTemplate" => ("spec.spec", d.value["spec"]["spec"].clone()),
            "ResourceClaim" => ("spec", d.value["spec"].clone()),
            "DeviceClass" => {
                read_class(&d, classes, errors);
                continue;
            }
            _ => {
                errors.push(wrong_kind(&d, "ResourceClaimTemplate or ResourceClaim"));
                continue;
            }
        };
        if args.name.as_ref().is_some_and(|n| n != d.name()) {
            continue;
        }
        let spec = claim_spec_to_v1(&d.value, spec_value)
            .map_err(|e| vec![d.error("apiVersion", e.to_string())])
            .and_then(|v| d.decode::<ResourceClaimSpec>(at, &v, true));
        match spec {
            Ok(spec) => claims.push(Claim {
                name: d.name().to_string(),
                kind: d.kind().to_string(),
                spec,
            }),
            Err(e) => errors.extend(e),
        }
    }
    claims
}

/// A note of the report in the CLI's words (the flags the inputs came from).
fn note_text(n: &Note, cluster: bool) -> String {
    let slices_from = if cluster { "the cluster" } else { "--slices" };
    match n {
        Note::HostSlicesReplaced { node, slices } => format!(
            "node {node}: dra.net devices from --sysfs; its {slices} dra.net slice(s) in {slices_from} are not used"
        ),
        Note::GpusForTopologyOnly { gpus } if cluster => format!(
            "the {gpus} GPU(s) in --sysfs give topology only: GPUs are published by their own DRA driver, \
             and the cluster has no slice of another driver"
        ),
        Note::DefaultClasses { names } => format!(
            "no --classes: using one DeviceClass per driver ({})",
            names.join(", ")
        ),
        Note::TaintRules { rules, taints } => format!(
            "{rules} DeviceTaintRule(s) in {slices_from} add {taints} taint(s) to devices; a request must tolerate them"
        ),
        Note::GpusForTopologyOnly { gpus } => format!(
            "the {gpus} GPU(s) in --sysfs give topology only: GPUs are published by their own DRA driver; \
             give its slices with --slices (kubectl get resourceslices -o yaml) to allocate them"
        ),
        other => other.to_string(),
    }
}

/// The node the `--sysfs` tree is: the node checked (`--node`), else `$NODE_NAME`, else the one
/// node the slices name, else the hostname.
fn sysfs_node_name(args: &CheckArgs, slice_nodes: &BTreeSet<String>) -> Result<String, CheckError> {
    let usage = |e: super::CliError| CheckError::Usage(e.to_string());
    if args.node().is_some() || std::env::var("NODE_NAME").is_ok_and(|s| !s.is_empty()) {
        return super::node_name(&args.node().cloned(), args.node_flag()).map_err(usage);
    }
    match slice_nodes.len() {
        0 => super::node_name(&None, "--node").map_err(usage),
        1 => Ok(slice_nodes.iter().next().cloned().unwrap_or_default()),
        _ => Err(CheckError::Usage(format!(
            "--sysfs describes one node and {} name several ({}): say which with --node",
            if args.cluster() {
                "the cluster's slices"
            } else {
                "--slices"
            },
            slice_nodes.iter().cloned().collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Writes the report as tables.
pub fn render_table(r: &Report, notes: &[String], out: &mut dyn Write) -> std::io::Result<()> {
    for n in notes {
        writeln!(out, "note: {n}")?;
    }
    if many::is_many(r) {
        if !notes.is_empty() {
            writeln!(out)?;
        }
        many::render(r, out)?;
        return render_verdicts(r, out);
    }
    let mut legend = false;
    for (i, c) in r.claims.iter().enumerate() {
        if i > 0 || !notes.is_empty() {
            writeln!(out)?;
        }
        let pods = c
            .pods
            .map(|p| format!(" ({} of {} pods)", p.fit, p.asked))
            .unwrap_or_default();
        match &c.node {
            Some(n) => writeln!(
                out,
                "{} {} on node {n}: {}{pods}",
                c.kind,
                c.name,
                c.verdict.as_str()
            )?,
            None => writeln!(out, "{} {}: {}{pods}", c.kind, c.name, c.verdict.as_str())?,
        }
        if let Some(e) = &c.error {
            writeln!(out, "  error: {e}")?;
            continue;
        }
        // With several pods, each row names its pod.
        let by_pod = c.pods.is_some();
        let mut header = vec!["POD"];
        header.extend([
            "REQUEST",
            "DRIVER",
            "POOL",
            "DEVICE",
            "LABEL",
            "NUMA",
            "PCIE ROOT",
        ]);
        let skip = usize::from(!by_pod);
        let mut rows = vec![header[skip..].iter().map(|h| h.to_string()).collect()];
        for d in &c.devices {
            let pod = d.pod.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
            let mut row = vec![
                pod,
                d.request.clone(),
                d.driver.clone(),
                d.pool.clone(),
                d.device.clone(),
                d.label.clone().unwrap_or_else(|| "-".into()),
                d.numa_node
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "-".into()),
                d.pcie_root.clone().unwrap_or_else(|| "-".into()),
            ];
            rows.push(row.split_off(skip));
        }
        write!(out, "{}", super::aligned(&rows, "  "))?;
        if !c.topology.is_empty() {
            let label = |dev: &str| {
                c.devices
                    .iter()
                    .find(|d| d.device == dev)
                    .and_then(|d| d.label.clone())
                    .unwrap_or_else(|| dev.to_string())
            };
            let mut nics: Vec<&str> = Vec::new();
            let mut gpus: Vec<&str> = Vec::new();
            for p in &c.topology {
                if !nics.contains(&p.nic.as_str()) {
                    nics.push(&p.nic);
                }
                if !gpus.contains(&p.gpu.as_str()) {
                    gpus.push(&p.gpu);
                }
            }
            let source = if c
                .topology
                .iter()
                .all(|p| p.source == report::RelationSource::Sysfs)
            {
                "from the PCI tree"
            } else {
                "from attributes: same pcieRoot => PHB or closer, same NUMA => NODE, else SYS"
            };
            writeln!(out, "  topology ({source}):")?;
            legend = true;
            let w = nics
                .iter()
                .map(|n| label(n).len())
                .max()
                .unwrap_or(4)
                .max(4)
                + 2;
            let mut line = format!("    {:<10}", "");
            for n in &nics {
                line.push_str(&format!("{:<w$}", label(n)));
            }
            writeln!(out, "{}", line.trim_end())?;
            for g in &gpus {
                let mut line = format!("    {g:<10}");
                for n in &nics {
                    let p = c.topology.iter().find(|p| p.gpu == *g && p.nic == *n);
                    let rel = p
                        .and_then(|p| p.relation)
                        .map(|r| r.to_string())
                        .unwrap_or_else(|| "?".into());
                    line.push_str(&format!("{rel:<w$}"));
                }
                writeln!(out, "{}", line.trim_end())?;
            }
        }
        for w in &c.warnings {
            writeln!(out, "  warning: {w}")?;
        }
    }
    if legend {
        writeln!(out, "\nLegend:")?;
        for (rel, what) in Relation::LEGEND {
            writeln!(out, "  {rel:<5}= {what}")?;
        }
    }
    render_verdicts(r, out)
}

/// The table's last lines: one per claim, where it fits and how.
fn render_verdicts(r: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    let summary = report::summarize(r);
    if !summary.is_empty() {
        writeln!(out, "\nVerdict:")?;
        for line in summary {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(())
}

/// Runs `dranet check`: prints the report and fails when a claim cannot be allocated.
pub fn run(args: &CheckArgs) -> Result<(), CheckError> {
    if args.node_name.is_some() {
        eprintln!("dranet: warning: --node-name is deprecated for check; use --node");
    }
    let mut skipped = Skipped::new();
    let report = check_skipping(args, &mut skipped)?;
    if !skipped.is_empty() {
        eprintln!(
            "dranet: note: --classes: read the DeviceClasses, skipped {}",
            skipped.join(", ")
        );
    }
    let cluster = args.cluster();
    let notes: Vec<String> = report.notes.iter().map(|n| note_text(n, cluster)).collect();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let io = |e: std::io::Error| CheckError::Output(e.to_string());
    match args.output {
        CheckFormat::Table => render_table(&report, &notes, &mut out).map_err(io)?,
        CheckFormat::Json => {
            let json = JsonReport {
                kubernetes_version: report.version.to_string(),
                claims: &report.claims,
                notes,
            };
            let text = serde_json::to_string_pretty(&json)
                .map_err(|e| CheckError::Output(e.to_string()))?;
            writeln!(out, "{text}").map_err(io)?;
        }
    }
    match verdict_error(&report, args.fail_on) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `-o json`: the report with its notes in the CLI's words.
#[derive(Serialize)]
#[serde(crate = "k8s_openapi::serde")]
struct JsonReport<'a> {
    /// The Kubernetes version answered for: the API server's, `--kubernetes-version`, or the
    /// newest supported.
    #[serde(rename = "kubernetesVersion")]
    kubernetes_version: String,
    claims: &'a [ClaimReport],
    notes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::verdict::exit;
    use super::*;
    use dranet_alloc::report::Verdict;

    /// Runs the check and returns the report, as `run` does without printing it.
    fn check(args: &CheckArgs) -> Result<Report, CheckError> {
        check_skipping(args, &mut Vec::new())
    }

    fn root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }

    fn args(claim: &str, name: Option<&str>) -> CheckArgs {
        CheckArgs {
            claim: root().join(claim),
            name: name.map(str::to_string),
            sysfs: None,
            slices: Vec::new(),
            classes: vec![root().join("examples/azure_aks/deviceclasses.yaml")],
            node_name: None,
            node: None,
            kubeconfig: None,
            from_cluster: false,
            kubernetes_version: None,
            max_cluster_slices_mib: MAX_CLUSTER_SLICES_MIB,
            fail_on: FailOn::Error,
            pods: report::Pods::ONE,
            cloud: crate::cmd::CloudArgs::default(),
            publish: crate::cmd::PublishArgs::default(),
            output: CheckFormat::Table,
        }
    }

    fn gb300(name: &str) -> CheckArgs {
        let mut a = args("examples/azure_aks/gb300/templates.yaml", Some(name));
        a.slices = vec![
            root().join("testdata/slices/azure-nd-gb300-v6-gpu.yaml"),
            root().join("testdata/slices/azure-nd-gb300-v6-dranet.yaml"),
        ];
        a
    }

    fn one(a: &CheckArgs) -> ClaimReport {
        let mut r = check(a).unwrap();
        assert_eq!(r.claims.len(), 1);
        r.claims.remove(0)
    }

    #[test]
    fn gb300_templates_from_slices() {
        let c = one(&gb300("1nic-aligned"));
        assert_eq!(c.error, None);
        assert_eq!(c.devices[1].label.as_deref(), Some("mlx5_0"));
        assert_eq!(c.topology.len(), 1);
        assert_eq!(c.topology[0].relation, Some(Relation::Node));
        assert_eq!(c.topology[0].same_numa, Some(true));
        assert_eq!(c.topology[0].source, report::RelationSource::Attributes);
        assert!(c.warnings.is_empty());

        let c = one(&gb300("1nic-unaligned"));
        assert_eq!(c.devices[1].label.as_deref(), Some("mlx5_2"));
        assert_eq!(c.topology[0].relation, Some(Relation::Sys));
        assert_eq!(c.topology[0].same_numa, Some(false));
        assert_eq!(c.warnings.len(), 1);
        assert!(
            c.warnings[0].contains("GPU gpu-0 is on NUMA node 0"),
            "{:?}",
            c.warnings
        );

        let c = one(&gb300("2nic-aligned"));
        let labels: Vec<_> = c
            .devices
            .iter()
            .filter(|d| d.nic)
            .map(|d| d.label.clone().unwrap())
            .collect();
        assert_eq!(labels, ["mlx5_0", "mlx5_1"]);
    }

    /// `--pods` on a NIC shared three ways: the table names each pod's rows and how many fit;
    /// bad counts are refused by the flag itself.
    #[test]
    fn pods_share_a_nic_until_its_children_run_out() {
        let mut a = args("examples/sharing/nic-share.yaml", Some("nic-share-a"));
        a.classes = Vec::new();
        a.slices = vec![root().join("testdata/slices/nic-share.yaml")];
        a.pods = "4".parse().unwrap();
        let r = check(&a).unwrap();
        let mut out = Vec::new();
        render_table(&r, &[], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("on node gpu-node-1: does not fit (3 of 4 pods)\n  error: pod 4 of 4: "),
            "{text}"
        );
        a.pods = "3".parse().unwrap();
        let r = check(&a).unwrap();
        let mut out = Vec::new();
        render_table(&r, &[], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("fits (3 of 3 pods)"), "{text}");
        assert!(text.contains("  POD  REQUEST"), "{text}");
        assert!(text.contains("\n  3    nic      dra.net"), "{text}");

        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            check: CheckArgs,
        }
        for (n, why) in [
            ("0", "0 pods: nothing to check"),
            ("1025", "1025 pods: at most 1024"),
            ("two", "\"two\" is not a number of pods"),
        ] {
            let e = Cli::try_parse_from(["check", "c.yaml", "--pods", n])
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains(why), "--pods {n}: {e}");
        }
        let ok = Cli::try_parse_from(["check", "c.yaml"]).unwrap();
        assert_eq!(ok.check.pods, report::Pods::ONE);
    }

    #[test]
    fn gb300_with_sysfs_uses_the_pci_tree() {
        let mut a = gb300("1nic-aligned");
        a.sysfs = Some(root().join("testdata/nodes/azure-nd-gb300-v6/sys"));
        a.slices = vec![root().join("testdata/slices/azure-nd-gb300-v6-gpu.yaml")];
        let c = one(&a);
        assert_eq!(c.devices[1].device, "pci-0101-00-00-0");
        // The tree is the node the GPU slices are on: one node, one pool.
        assert_eq!(c.devices[1].pool, "aks-gb300-0");
        assert_eq!(c.topology[0].relation, Some(Relation::Node));
        assert_eq!(c.topology[0].source, report::RelationSource::Sysfs);
    }

    #[test]
    fn bm_mi300x_same_root_pair_is_pix_from_sysfs_and_phb_from_attributes() {
        let mut a = args(
            "examples/azure_aks/mi300x/templates.yaml",
            Some("gpu1-same-pcie-root"),
        );
        a.classes.clear();
        a.sysfs = Some(root().join("testdata/nodes/bm-mi300x-8/sys"));
        a.slices = vec![root().join("testdata/slices/bm-mi300x-8-gpu.yaml")];
        let c = one(&a);
        assert_eq!(c.devices[1].label.as_deref(), Some("mlx5_1"));
        assert_eq!(c.topology[0].relation, Some(Relation::Pix));
        a.sysfs = None;
        a.slices
            .push(root().join("testdata/slices/bm-mi300x-8-dranet.yaml"));
        let c = one(&a);
        assert_eq!(c.topology[0].relation, Some(Relation::Phb));
    }

    #[test]
    fn cross_numa_claims_warn_per_gpu() {
        let mut a = args("examples/azure_aks/mi300x/templates.yaml", None);
        a.slices = vec![
            root().join("testdata/slices/azure-nd-mi300x-v5-gpu.yaml"),
            root().join("testdata/slices/azure-nd-mi300x-v5-dranet.yaml"),
        ];
        let r = check(&a).unwrap();
        let by = |n: &str| r.claims.iter().find(|c| c.name == n).unwrap();
        assert!(by("4nic-same-numa").warnings.is_empty());
        // One line for the four stranded GPUs, not four.
        let cross = &by("4nic-cross-numa").warnings;
        assert_eq!(cross.len(), 1, "{cross:?}");
        assert!(
            cross[0].starts_with("GPUs gpu-0, gpu-1, gpu-2, gpu-3 are on NUMA node 0"),
            "{cross:?}"
        );
        // All 8 NICs: every GPU has a local NIC, so no warning although half the pairs are SYS.
        let all = by("8nic-all");
        assert!(all.warnings.is_empty());
        assert_eq!(all.topology.len(), 64);
        assert_eq!(
            all.topology
                .iter()
                .filter(|p| p.relation == Some(Relation::Sys))
                .count(),
            32
        );
        let mut out = Vec::new();
        let notes: Vec<String> = r.notes.iter().map(|n| note_text(n, false)).collect();
        render_table(&r, &notes, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("ResourceClaimTemplate 4nic-cross-numa"),
            "{text}"
        );
        assert!(text.contains("warning: GPUs gpu-0, gpu-1"), "{text}");
    }

    #[test]
    fn device_taint_rules_in_the_slices_files_taint_what_they_select() {
        let dir = tempfile::tempdir().unwrap();
        let rules = dir.path().join("rules.yaml");
        let rule = |name: &str, device: &str| {
            format!(
                "apiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata: {{name: {name}}}\n\
                 spec:\n  deviceSelector: {{driver: dra.net, device: {device}}}\n  \
                 taint: {{key: example.com/maintenance, effect: NoSchedule}}\n"
            )
        };
        std::fs::write(&rules, rule("maint", "pci-0101-00-00-0")).unwrap();
        let mut a = gb300("1nic-aligned");
        a.slices.push(rules.clone());
        let r = check(&a).unwrap();
        assert_eq!(r.claims[0].verdict, report::Verdict::DoesNotFit);
        let notes: Vec<String> = r.notes.iter().map(|n| note_text(n, false)).collect();
        assert_eq!(
            notes,
            [
                "1 DeviceTaintRule(s) in --slices add 1 taint(s) to devices; a request must tolerate them"
            ]
        );
        // A rule the scheduler would read otherwise is an error at its document.
        std::fs::write(
            &rules,
            format!(
                "{}---\n{}",
                rule("maint", "pci-0101-00-00-0"),
                rule("bad", "x").replace("deviceSelector: {", "deviceSelector: {selectors: [], ")
            ),
        )
        .unwrap();
        let e = check(&a).unwrap_err().to_string();
        assert!(
            e.contains("document 2 (DeviceTaintRule bad)")
                && e.contains("unknown field `selectors`"),
            "{e}"
        );
    }

    #[test]
    fn bad_inputs_are_clear_errors() {
        let mut a = args("examples/azure_aks/gb300/templates.yaml", None);
        assert!(
            matches!(check(&a), Err(CheckError::Usage(m)) if m.contains("--sysfs DIR and/or --slices"))
        );
        a.slices = vec![root().join("examples/azure_aks/gb300/templates.yaml")];
        let e = check(&a).unwrap_err().to_string();
        assert!(
            e.contains("document 1") && e.contains("not ResourceSlice"),
            "{e}"
        );
        let mut a = gb300("no-such-template");
        let e = check(&a).unwrap_err().to_string();
        assert!(
            e.contains("no claim or template named \"no-such-template\""),
            "{e}"
        );
        a.slices.push(root().join("does/not/exist.yaml"));
        match check(&a) {
            Err(CheckError::Input(e)) => {
                assert!(e.0.len() == 1 && e.0[0].doc.is_none(), "{e}");
                let file = format!("{}: ", a.slices[2].display());
                assert!(e.to_string().starts_with(&file), "{e}");
            }
            other => panic!("{other:?}"),
        }
        let mut a = gb300("1nic-aligned");
        a.sysfs = Some(root().join("does/not/exist"));
        assert!(matches!(check(&a), Err(CheckError::Usage(m)) if m.contains("not a directory")));
    }

    #[test]
    fn classes_files_for_kubectl_apply_give_their_device_classes() {
        // A file `kubectl apply -f` takes: the classes beside a template and a Pod.
        let classes = root().join("examples/azure_aks/deviceclasses.yaml");
        let text = std::fs::read_to_string(&classes).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("apply.yaml");
        let extra = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec: {}\n---\n\
                     apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\n\
                     metadata:\n  name: nics\nspec:\n  spec: {}\n---\n";
        std::fs::write(&file, format!("{extra}{text}")).unwrap();
        let only = check(&gb300("1nic-aligned")).unwrap();
        let mut a = gb300("1nic-aligned");
        a.classes = vec![file.clone()];
        let mut skipped = Skipped::new();
        let r = check_skipping(&a, &mut skipped).unwrap();
        let shown = file.display();
        assert_eq!(
            skipped,
            [
                format!("{shown}: Pod web"),
                format!("{shown}: ResourceClaimTemplate nics")
            ]
        );
        assert_eq!(
            serde_json::to_value(&r.claims).unwrap(),
            serde_json::to_value(&only.claims).unwrap()
        );
        // A document that is no Kubernetes object is still an error.
        std::fs::write(&file, format!("just: text\n---\n{text}")).unwrap();
        let e = check(&a).unwrap_err().to_string();
        assert!(e.contains("not a Kubernetes object"), "{e}");
    }

    /// The GB300 slices with the dra.net ones moved to another node, as `kubectl get
    /// resourceslices -o yaml` gives on a two-node cluster.
    fn two_nodes(dir: &Path) -> PathBuf {
        let text =
            std::fs::read_to_string(root().join("testdata/slices/azure-nd-gb300-v6-dranet.yaml"))
                .unwrap();
        let moved = dir.join("other-node.yaml");
        std::fs::write(&moved, text.replace("aks-gb300-0", "aks-gb300-1")).unwrap();
        moved
    }

    #[test]
    fn devices_of_different_nodes_are_never_paired() {
        let tmp = tempfile::tempdir().unwrap();
        let mut a = gb300("1nic-aligned");
        a.slices = vec![
            root().join("testdata/slices/azure-nd-gb300-v6-gpu.yaml"),
            two_nodes(tmp.path()),
        ];
        let r = check(&a).unwrap();
        let per_node: Vec<(Option<&str>, Verdict)> = r
            .claims
            .iter()
            .map(|c| (c.node.as_deref(), c.verdict))
            .collect();
        assert_eq!(
            per_node,
            [
                (Some("aks-gb300-0"), Verdict::DoesNotFit),
                (Some("aks-gb300-1"), Verdict::DoesNotFit)
            ]
        );
        let e = verdict_error(&r, FailOn::Error).unwrap();
        assert!(
            matches!(
                &e,
                CheckError::Verdict {
                    code: exit::DOES_NOT_FIT,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            report::summarize(&r),
            [
                "ResourceClaimTemplate 1nic-aligned: fits on none of 2 nodes; 1 of them: request nic: DeviceClass dranet.net selects none of the node's devices"
            ]
        );
        // With the NICs on the GPUs' node too, it fits there and only there.
        a.slices
            .push(root().join("testdata/slices/azure-nd-gb300-v6-dranet.yaml"));
        let r = check(&a).unwrap();
        assert_eq!(r.claims[0].verdict, Verdict::Fits);
        assert_eq!(r.claims[1].verdict, Verdict::DoesNotFit);
        assert_eq!(
            report::summarize(&r),
            [
                "ResourceClaimTemplate 1nic-aligned: fits on aks-gb300-0; does not fit on 1 other node(s)"
            ]
        );
        assert!(verdict_error(&r, FailOn::Error).is_none());
        a.node = Some("aks-gb300-1".into());
        assert_eq!(check(&a).unwrap().claims.len(), 1);
        a.node = Some("aks-gb300-9".into());
        assert!(
            matches!(check(&a), Err(CheckError::Usage(m)) if m.contains("aks-gb300-0, aks-gb300-1"))
        );
    }

    #[test]
    fn sysfs_and_slices_of_one_node_count_each_device_once() {
        // The node has 2 NUMA-0 NICs; --slices has its dra.net slice too.
        let tmp = tempfile::tempdir().unwrap();
        let claim = tmp.path().join("claim.yaml");
        std::fs::write(
            &claim,
            r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: four-numa0}
spec:
  devices:
    requests:
    - name: nic
      exactly:
        deviceClassName: dranet.net
        count: 4
        selectors:
        - cel: {expression: 'device.attributes["dra.net"].numaNode == 0'}
"#,
        )
        .unwrap();
        let mut a = gb300("four-numa0");
        a.claim = claim;
        a.node_name = None;
        a.sysfs = Some(root().join("testdata/nodes/azure-nd-gb300-v6/sys"));
        let r = check(&a).unwrap();
        assert_eq!(r.claims.len(), 1, "one node");
        assert_eq!(r.claims[0].node.as_deref(), Some("aks-gb300-0"));
        assert_eq!(
            r.claims[0].verdict,
            Verdict::DoesNotFit,
            "{:?}",
            r.claims[0]
        );
        assert!(
            r.notes
                .iter()
                .any(|n| note_text(n, false).contains("dra.net devices from --sysfs")),
            "{:?}",
            r.notes
        );
        // Several nodes in the slices: the tree's node must be named.
        a.slices.push(two_nodes(tmp.path()));
        assert!(matches!(check(&a), Err(CheckError::Usage(m)) if m.contains("--node")));
        // Named, it is also the one node checked; the deprecated spelling still works.
        a.node = Some("aks-gb300-0".into());
        let r = check(&a).unwrap();
        assert_eq!(r.claims.len(), 1, "one node");
        assert_eq!(r.claims[0].node.as_deref(), Some("aks-gb300-0"));
        a.node = None;
        a.node_name = Some("aks-gb300-0".into());
        assert_eq!(check(&a).unwrap().claims.len(), 1, "one node");
    }

    #[test]
    fn unaligned_fits_fail_only_with_fail_on_warning() {
        let r = check(&gb300("1nic-unaligned")).unwrap();
        assert_eq!(r.claims[0].verdict, Verdict::FitsUnaligned);
        assert!(verdict_error(&r, FailOn::Error).is_none());
        let e = verdict_error(&r, FailOn::Warning).unwrap();
        assert!(matches!(
            e,
            CheckError::Verdict {
                code: exit::UNALIGNED,
                ..
            }
        ));
    }

    #[test]
    fn a_cel_error_is_an_invalid_claim_not_a_misfit() {
        let r = check(&gb300("ib-same-fabric")).unwrap();
        assert_eq!(
            r.claims[0].verdict,
            Verdict::Invalid,
            "{:?}",
            r.claims[0].error
        );
        let e = verdict_error(&r, FailOn::Error).unwrap();
        assert!(matches!(
            e,
            CheckError::Verdict {
                code: exit::INVALID,
                ..
            }
        ));
    }

    #[test]
    fn v1beta1_claims_and_slices_are_read_and_other_versions_named() {
        let tmp = tempfile::tempdir().unwrap();
        let claim = tmp.path().join("claim.yaml");
        std::fs::write(
            &claim,
            r#"apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaimTemplate
metadata: {name: old}
spec:
  spec:
    devices:
      requests:
      - name: nic
        deviceClassName: dranet.net
        selectors:
        - cel: {expression: 'device.attributes["dra.net"].numaNode == 1'}
"#,
        )
        .unwrap();
        let mut a = gb300("old");
        a.claim = claim.clone();
        let r = check(&a).unwrap();
        assert_eq!(
            r.claims[0].verdict,
            Verdict::Fits,
            "{:?}",
            r.claims[0].error
        );
        assert_eq!(r.claims[0].devices[0].numa_node, Some(1));
        let text = std::fs::read_to_string(&claim).unwrap();
        std::fs::write(&claim, text.replace("v1beta1", "v1alpha3")).unwrap();
        let e = check(&a).unwrap_err().to_string();
        assert!(
            e.contains("\"resource.k8s.io/v1alpha3\" is not served") && e.contains("v1beta2"),
            "{e}"
        );
    }
}
