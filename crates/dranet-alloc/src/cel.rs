//! CEL for DRA device selectors: the Kubernetes DRA environment, compiled once, evaluated per
//! device without building a map for each device.
//!
//! The environment is the one the Kubernetes scheduler gives `selectors[].cel.expression`:
//!
//! - `device.driver` (string), `device.allowMultipleAllocations` (bool; only for the scheduler,
//!   see below);
//! - `device.attributes["<domain>"].<name>` or `["<name>"]`: unqualified attribute names are in
//!   the driver's domain (`rdmaDevice` of driver `dra.net` is `device.attributes["dra.net"]
//!   .rdmaDevice`), qualified ones (`resource.kubernetes.io/pcieRoot`) under their own domain;
//!   a domain without attributes is an empty map, and reading a missing attribute is a runtime
//!   error, which makes the selector fail for that device only;
//! - `device.capacity["<domain>"].<name>`: quantities;
//! - the Kubernetes semver library (`semver("1.2.3")`, `isSemver`, `major()`, `minor()`,
//!   `patch()`, `compareTo`, `isGreaterThan`, `isLessThan`) and quantity library (`quantity`,
//!   `isQuantity`, `compareTo`, `isGreaterThan`, `isLessThan`, `add`, `sub`, `asInteger`,
//!   `asApproximateFloat`, `isInteger`, `sign`);
//! - standard CEL: literals, lists, maps, arithmetic with overflow errors, comparisons, `in`,
//!   `&&`/`||` with CEL's error absorption, `?:`, `has()`, `all`/`exists`/`exists_one`/`map`/
//!   `filter`, `size`, `startsWith`/`endsWith`/`contains`, `lowerAscii`/`upperAscii`/`trim`,
//!   conversions `int`/`uint`/`double`/`string`.
//!
//! Expressions are type-checked at compile time against the scheduler's declarations (cel-go's
//! standard definitions, optionals, the strings/lists/sets/two-variable-comprehension
//! extensions, and the Kubernetes quantity, semver, IP/CIDR, URL, regex, lists and format
//! libraries), so a selector the API server rejects is a compile error here too.
//!
//! The API server checks a selector of a new claim, claim template or device class in an older
//! environment than the one the scheduler compiles stored selectors in: that of the minor
//! version below its own, with default feature gates. [`Program::compile_at`] checks as the API
//! server of a [`KubernetesVersion`](crate::KubernetesVersion) does at creation, [`Program::compile_for_scheduler_at`] as its
//! scheduler does ([`Program::compile`] and [`Program::compile_for_scheduler`]: 1.34). What
//! differs:
//!
//! | | 1.34 API server | 1.34 scheduler | 1.36 API server | 1.36 scheduler |
//! |---|---|---|---|---|
//! | cel-go lists extension (`sort`, `sortBy`, `distinct`, `flatten`, `slice`, `reverse`, `lists.range`) | no | yes | yes | yes |
//! | `device.allowMultipleAllocations` (DRAConsumableCapacity) | no | yes | yes | yes |
//! | DRA's `includes` (DRAListTypeAttributes, off) | no | no | no | yes |
//!
//! ```
//! use dranet_alloc::cel::{AttributeValue, DeviceAttributes, DeviceView, Program, Quantity};
//!
//! let p = Program::compile(r#"device.attributes["dra.net"].numaNode == 0"#).unwrap();
//! let no_capacity: [(&str, Quantity); 0] = [];
//! let attrs = DeviceAttributes::new("dra.net", [("numaNode", AttributeValue::Int(0))], no_capacity)
//!     .unwrap();
//! let view = DeviceView { driver: "dra.net", attributes: &attrs, allow_multiple_allocations: false };
//! assert!(p.matches(&view).unwrap());
//! ```

mod activation;
mod ast;
mod attrs;
mod cache;
mod check;
mod civil;
mod cost;
mod decls;
mod device;
mod error;
mod eval;
mod explain;
mod fast;
mod funcs;
mod hash;
mod message;
mod parse;
mod program;
mod regex_cache;
mod stack;
mod types;
#[cfg(feature = "tzdb")]
mod tz;
mod validate;
mod value;

pub use activation::MAX_EVAL_STEPS;
pub use attrs::{AttrKey, AttributesError, DeviceAttributes, split_qualified};
pub use cache::{CacheStats, ProgramCache};
pub use cost::{CostEstimate, MAX_SELECTOR_COST};
pub use device::DeviceView;
/// The value type of `device.attributes`: dranet-core's attribute value, the one attribute type
/// of the dranet crates.
pub use dranet_core::AttributeValue;
/// The value types of the Kubernetes quantity and semver libraries, from dranet-core.
pub use dranet_core::{Quantity, Semver};
pub use error::{CelError, MAX_EXPRESSION_LEN};
pub use program::Program;

pub(crate) use attrs::{Given, NameArena};
pub(crate) use device::{FastDevice, FullDevice, Scalar};
pub(crate) use hash::{hash_words, same_bytes};
