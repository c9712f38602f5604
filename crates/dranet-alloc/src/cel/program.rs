//! A compiled selector: the shortcut for the common shapes, else the checked tree, evaluated
//! per device.

use std::sync::OnceLock;

use super::attrs::DeviceAttributes;
use super::cost::{self, CostEstimate, MAX_SELECTOR_COST};
use super::decls::EnvType;
use super::device::{DeviceView, FullDevice};
use super::error::{CelError, MAX_EXPRESSION_LEN};
use super::{ast, check, eval, explain, fast, parse, types, validate, value};
use crate::version::KubernetesVersion;

/// A compiled selector expression.
#[derive(Debug, Clone)]
pub struct Program {
    source: String,
    /// The shortcut for the common shapes, when the expression has one.
    pub(super) fast: Option<fast::Fast>,
    /// The checked tree: built at once by the general compile, on first need when the
    /// expression was recognised as one of the common shapes (see [`fast::recognize`]).
    checked: OnceLock<Result<Checked, CelError>>,
    env: EnvType,
    /// The named time zones this program's evaluations read, shared by its clones.
    #[cfg(feature = "tzdb")]
    zones: std::sync::Arc<super::tz::ZoneCache>,
    /// The patterns this program's evaluations compiled, shared by its clones.
    regexes: std::sync::Arc<super::regex_cache::RegexCache>,
}

/// What the general compile makes of an expression.
#[derive(Debug, Clone)]
pub(super) struct Checked {
    pub(super) expr: ast::Expr,
    pub(super) refs: Vec<check::Ref>,
    /// The API server's cost estimate; `None` when compiled for the scheduler, which skips it.
    pub(super) cost: Option<CostEstimate>,
}

/// The compile issues in source order as cel-go reports them (the first names the position a
/// user fixes first).
fn compile_error(mut issues: Vec<parse::Issue>, source: &str) -> CelError {
    // cel-go sorts its issues by position, stably; one without a position comes first.
    issues.sort_by_key(|i| i.offset);
    let mut it = issues.into_iter();
    let Some(first) = it.next() else {
        return CelError::Syntax {
            position: 0,
            message: "invalid expression".to_string(),
        };
    };
    let rest: Vec<String> = it.map(|i| i.message).collect();
    let mut message = first.message;
    if !rest.is_empty() {
        message.push_str("; ");
        message.push_str(&rest.join("; "));
    }
    // Issues carry code point offsets; the error reports a byte offset into the source.
    let position = first
        .offset
        .and_then(|cp| source.char_indices().nth(cp as usize).map(|(b, _)| b))
        .unwrap_or(source.len());
    CelError::Syntax { position, message }
}

/// Appended to a compile error of a selector the scheduler's environment of `version` accepts.
fn new_expressions_hint(version: KubernetesVersion) -> String {
    format!(
        "the {version} scheduler accepts this selector, but the API server refuses it in a new \
         claim, claim template or device class: it checks new selectors in the CEL environment \
         of Kubernetes 1.{} with default feature gates",
        version.new_expressions_minor()
    )
}

impl Program {
    /// Compiles `source` as the 1.34 API server admits it when a claim, claim template or
    /// device class is created: [`Program::compile_at`] with [`KubernetesVersion::V1_34`].
    pub fn compile(source: &str) -> Result<Program, CelError> {
        Program::compile_at(source, KubernetesVersion::V1_34)
    }

    /// Compiles `source` as the API server of `version` admits it when a claim, claim template
    /// or device class is created: parsed and type-checked in the environment it checks new
    /// selectors in (the base environment one minor below `version`, default feature gates:
    /// for 1.34 without the lists extension and `device.allowMultipleAllocations`, for 1.36
    /// with both but without `includes`), and refused, as the API server refuses the object,
    /// when its estimated worst-case cost is over [`MAX_SELECTOR_COST`]
    /// ([`CelError::TooComplex`]).
    pub fn compile_at(source: &str, version: KubernetesVersion) -> Result<Program, CelError> {
        Program::build(source, EnvType::New(version))
    }

    /// Compiles as the 1.34 scheduler does: [`Program::compile_for_scheduler_at`] with
    /// [`KubernetesVersion::V1_34`].
    pub fn compile_for_scheduler(source: &str) -> Result<Program, CelError> {
        Program::compile_for_scheduler_at(source, KubernetesVersion::V1_34)
    }

    /// Compiles as the scheduler of `version` does: in its stored-expressions environment, a
    /// superset of [`Program::compile_at`]'s, and without the cost estimate, which the
    /// scheduler does not make (it only compiles selectors the API server admitted).
    pub fn compile_for_scheduler_at(
        source: &str,
        version: KubernetesVersion,
    ) -> Result<Program, CelError> {
        Program::build(source, EnvType::Stored(version))
    }

    /// The Kubernetes version whose environment this program was compiled in.
    pub fn kube_version(&self) -> KubernetesVersion {
        self.env.version()
    }

    /// The API server's estimate of the cost of evaluating this selector on one device, in CEL
    /// cost units; `None` for a program from [`Program::compile_for_scheduler`].
    pub fn estimated_cost(&self) -> Option<CostEstimate> {
        self.checked().ok().and_then(|c| c.cost)
    }

    fn build(source: &str, env: EnvType) -> Result<Program, CelError> {
        // The 10 KiB limit is the API server's field validation, not CEL's: the scheduler
        // compiles a stored selector of any length, up to cel-go's parser limit (100,000 code
        // points, which the parser checks).
        if env.is_new() && source.len() > MAX_EXPRESSION_LEN {
            return Err(CelError::TooLong(source.len()));
        }
        // The common shapes compile to the same program without the general passes, which cost
        // ten times more; their checked tree is built only if an evaluation needs it.
        if let Some(f) = fast::recognize(source) {
            return Ok(Program {
                source: source.to_string(),
                fast: Some(f),
                checked: OnceLock::new(),
                env,
                #[cfg(feature = "tzdb")]
                zones: Default::default(),
                regexes: Default::default(),
            });
        }
        let (checked, fast) = Program::check(source, env)?;
        Ok(Program {
            source: source.to_string(),
            fast,
            checked: OnceLock::from(Ok(checked)),
            env,
            #[cfg(feature = "tzdb")]
            zones: Default::default(),
            regexes: Default::default(),
        })
    }

    /// The general compile: parse, type-check, the scheduler's validators and, for the API
    /// server's environment, the cost estimate.
    pub(super) fn check(
        source: &str,
        env: EnvType,
    ) -> Result<(Checked, Option<fast::Fast>), CelError> {
        let mut parsed = parse::parse(source, env).map_err(|i| compile_error(i, source))?;
        let checked = check::check(&mut parsed.expr, &parsed.positions, env).map_err(|i| {
            let mut e = compile_error(i, source);
            // Checked again only on this error path: whether the environment is the reason.
            let env_hint = (env.is_new() && Program::check(source, env.stored()).is_ok())
                .then(|| new_expressions_hint(env.version()));
            if let (CelError::Syntax { message, .. }, Some(hint)) = (
                &mut e,
                env_hint.or_else(|| explain::compile_hint(&parsed.expr)),
            ) {
                message.push_str(" (");
                message.push_str(&hint);
                message.push(')');
            }
            e
        })?;
        let root = checked
            .types
            .get(parsed.expr.id as usize)
            .cloned()
            .unwrap_or(types::Type::Dyn);
        // The scheduler takes `bool` or `any` (what attribute values are), not `dyn`.
        if !matches!(root, types::Type::Bool | types::Type::Any) {
            return Err(CelError::NotBool(root.to_string()));
        }
        let issues = validate::validate(
            env.version(),
            &parsed.expr,
            &checked.types,
            &checked.refs,
            &parsed.positions,
        );
        if !issues.is_empty() {
            return Err(compile_error(issues, source));
        }
        validate::instantiate(
            env.version(),
            &parsed.expr,
            &checked.refs,
            &parsed.positions,
        )
        .map_err(|i| compile_error(vec![i], source))?;
        // The API server estimates the cost of the selectors it admits; the scheduler does not.
        let cost = if env.is_new() {
            let c = cost::estimate(&parsed.expr, &checked.types, &checked.refs);
            if c.max > MAX_SELECTOR_COST {
                return Err(CelError::TooComplex {
                    estimated: c.max,
                    limit: MAX_SELECTOR_COST,
                });
            }
            Some(c)
        } else {
            None
        };
        let fast = fast::plan(&parsed.expr, &checked.refs);
        Ok((
            Checked {
                expr: parsed.expr,
                refs: checked.refs,
                cost,
            },
            fast,
        ))
    }

    /// The checked tree, built now if the expression was compiled by recognising its shape.
    /// The shapes recognised always compile, so the error is only a safeguard.
    pub(super) fn checked(&self) -> Result<&Checked, CelError> {
        self.checked
            .get_or_init(|| Program::check(&self.source, self.env).map(|(c, _)| c))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Why this selector matches none of `devices`, when the selector shows it: an attribute
    /// compared with a literal of a type the attribute never has on them, or a qualified
    /// attribute name used as a domain. Empty when there is nothing to say.
    pub fn explain_no_match(&self, devices: &[&DeviceAttributes]) -> Vec<String> {
        match self.checked() {
            Ok(checked) => explain::no_match_hints(&checked.expr, &checked.refs, devices),
            Err(_) => Vec::new(),
        }
    }

    /// The expression as given.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates the selector for one device: `Ok(true)` when it selects the device, an error
    /// when evaluation fails for this device (the scheduler then fails the claim).
    pub fn matches(&self, device: &DeviceView<'_>) -> Result<bool, CelError> {
        self.matches_device(device)
    }

    /// Whether the program reads nothing of a device but its driver, so that its answer is
    /// the same for every device of a pool (and never an error).
    pub(crate) fn driver_only(&self) -> bool {
        self.fast.as_ref().is_some_and(fast::Fast::driver_only)
    }

    /// [`Program::matches`] on a device that gives its full view ([`DeviceView`], with the
    /// attribute index) only when the evaluator needs it: the allocator builds a device's index
    /// only for selectors the shortcut cannot decide.
    pub(crate) fn matches_device<D: FullDevice + ?Sized>(
        &self,
        device: &D,
    ) -> Result<bool, CelError> {
        if let Some(b) = self.fast.as_ref().and_then(|f| f.eval(device)) {
            return Ok(b);
        }
        let checked = self.checked()?;
        let mut ev = eval::Eval::new(device.view(), &checked.refs, self.env.version());
        #[cfg(feature = "tzdb")]
        ev.set_zones(&self.zones);
        ev.set_regexes(&self.regexes);
        match ev.eval(&checked.expr) {
            Ok(value::Value::Bool(b)) => Ok(b),
            // A `dyn` result (an attribute) that is not a bool: the scheduler's runtime error.
            Ok(other) => Err(CelError::Runtime(format!(
                "CEL result of type {t} could not be converted to bool: unsupported type \
                 conversion from '{t}' to bool",
                t = other.type_name()
            ))),
            Err(e) => Err(CelError::Runtime(e.message().to_string())),
        }
    }
}
