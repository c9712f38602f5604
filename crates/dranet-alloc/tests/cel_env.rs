//! The Kubernetes DRA CEL environment: device fields, attribute domains, missing attributes,
//! the semver and quantity libraries, and compile-time errors.

use dranet_alloc::KubernetesVersion;
use dranet_alloc::cel::{
    AttributeValue, CelError, DeviceAttributes, DeviceView, Program, Quantity, Semver,
};

fn attrs() -> DeviceAttributes {
    DeviceAttributes::new(
        "dra.net",
        [
            ("rdmaDevice", AttributeValue::String("mlx5_0".into())),
            ("numaNode", AttributeValue::Int(0)),
            ("rdma", AttributeValue::Bool(true)),
            (
                "firmware",
                AttributeValue::Version(Semver::parse("28.39.1002").unwrap()),
            ),
            (
                "resource.kubernetes.io/pcieRoot",
                AttributeValue::String("pci0000:00".into()),
            ),
            (
                "resource.kubernetes.io/numaNodes",
                AttributeValue::Ints(vec![0, 1]),
            ),
            (
                "azure.dra.net/vmSize",
                AttributeValue::String("Standard_ND_GB300_v6".into()),
            ),
        ],
        [
            ("memory", Quantity::parse("192Gi").unwrap()),
            ("example.com/links", Quantity::parse("4").unwrap()),
        ],
    )
    .unwrap()
}

fn eval(expr: &str) -> Result<bool, CelError> {
    let a = attrs();
    let v = DeviceView {
        driver: "dra.net",
        attributes: &a,
        allow_multiple_allocations: false,
    };
    Program::compile(expr)?.matches(&v)
}

fn yes(expr: &str) {
    assert_eq!(eval(expr), Ok(true), "{expr}");
}

fn no(expr: &str) {
    assert_eq!(eval(expr), Ok(false), "{expr}");
}

fn runtime_err(expr: &str) -> String {
    match eval(expr) {
        Err(CelError::Runtime(m)) => m,
        other => panic!("{expr}: expected a runtime error, got {other:?}"),
    }
}

fn compile_err(expr: &str) -> String {
    match Program::compile(expr) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("{expr} compiled"),
    }
}

#[test]
fn device_fields_and_both_attribute_syntaxes() {
    yes(r#"device.driver == "dra.net""#);
    no(r#"device.driver == "gpu.nvidia.com""#);
    yes(r#"device.attributes["dra.net"].rdmaDevice == "mlx5_0""#);
    yes(r#"device.attributes["dra.net"]["rdmaDevice"] == "mlx5_0""#);
    yes(
        r#"device.attributes["dra.net"]["rdma"] == true && device.attributes["dra.net"]["numaNode"] == 0"#,
    );
    yes(r#"device.attributes["dra.net"].rdma"#);
}

#[test]
fn what_only_the_scheduler_declares_is_refused_in_a_new_selector() {
    let a = attrs();
    for multi in [false, true] {
        let v = DeviceView {
            driver: "dra.net",
            attributes: &a,
            allow_multiple_allocations: multi,
        };
        let p = Program::compile_for_scheduler("device.allowMultipleAllocations").unwrap();
        assert_eq!(p.matches(&v), Ok(multi));
    }
    let p = Program::compile_for_scheduler("[2, 1, 3].sortBy(x, -x) == [3, 2, 1]").unwrap();
    let v = DeviceView {
        driver: "dra.net",
        attributes: &a,
        allow_multiple_allocations: false,
    };
    assert_eq!(p.matches(&v), Ok(true));
    // The API server's words, and why the scheduler's acceptance does not help.
    let e = compile_err("device.allowMultipleAllocations");
    assert!(
        e.contains("undefined field 'allowMultipleAllocations'"),
        "{e}"
    );
    assert!(e.contains("Kubernetes 1.33"), "{e}");
    let e = compile_err("[2, 1, 3].sortBy(x, -x) == [3, 2, 1]");
    assert!(
        e.contains("undeclared reference to 'sortBy' (in container '')"),
        "{e}"
    );
    let e = compile_err("lists.range(3) == [0, 1, 2]");
    assert!(e.contains("undeclared reference to 'lists'"), "{e}");
    // A selector wrong in both environments gets no such hint.
    let e = compile_err("[1].sort() == 1");
    assert!(!e.contains("1.33"), "{e}");
}

#[test]
fn qualified_names_live_under_their_own_domain() {
    yes(r#"device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00""#);
    yes(r#"device.attributes["azure.dra.net"].vmSize.startsWith("Standard_ND")"#);
    // Not under the driver's domain.
    assert!(
        runtime_err(r#"device.attributes["dra.net"].pcieRoot == "x""#)
            .contains("no such key: pcieRoot")
    );
}

#[test]
fn missing_attributes_and_domains() {
    let m = runtime_err(r#"device.attributes["dra.net"].model == "cx7""#);
    assert!(m.contains("no such key: model"), "{m}");
    // An unknown domain is an empty map: has() and `in` are false, a lookup is an error.
    no(r#"has(device.attributes["other.example.com"].x)"#);
    no(r#""x" in device.attributes["other.example.com"]"#);
    yes(r#""rdmaDevice" in device.attributes["dra.net"]"#);
    yes(r#"has(device.attributes["dra.net"].rdmaDevice)"#);
    // Guarding with has() is the documented way to tolerate a missing attribute.
    no(r#"has(device.attributes["dra.net"].model) && device.attributes["dra.net"].model == "cx7""#);
    // CEL's && absorbs an error when the other side is false, in either order.
    no(r#"device.attributes["dra.net"].model == "cx7" && false"#);
    yes(r#"device.attributes["dra.net"].model == "cx7" || true"#);
    assert!(
        runtime_err(r#"device.attributes["dra.net"].model == "cx7" && true"#).contains("model")
    );
}

#[test]
fn semver_library() {
    yes(r#"device.attributes["dra.net"].firmware.isGreaterThan(semver("28.0.0"))"#);
    yes(r#"device.attributes["dra.net"].firmware == semver("28.39.1002")"#);
    yes(r#"device.attributes["dra.net"].firmware.compareTo(semver("28.39.1002")) == 0"#);
    yes(r#"semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))"#);
    yes(
        r#"device.attributes["dra.net"].firmware.major() == 28 && device.attributes["dra.net"].firmware.minor() == 39"#,
    );
    yes(r#"isSemver("1.2.3") && !isSemver("1.2")"#);
    // The scheduler's message is the semver parser's own.
    assert!(
        runtime_err(r#"semver("v1") == semver("1.0.0")"#)
            .contains("No Major.Minor.Patch elements found")
    );
}

#[test]
fn quantity_library_and_capacity() {
    yes(r#"device.capacity["dra.net"].memory.compareTo(quantity("128Gi")) > 0"#);
    yes(r#"device.capacity["dra.net"].memory.isGreaterThan(quantity("191Gi"))"#);
    yes(r#"device.capacity["example.com"].links.asInteger() == 4"#);
    yes(r#"quantity("1.5").add(quantity("500m")) == quantity("2")"#);
    yes(r#"quantity("1").sub(2).compareTo(quantity("0")) == -1"#);
    // `sign()` is not in the 1.34 quantity library.
    assert!(compile_err(r#"quantity("1").sign() == 1"#).contains("found no matching overload"));
    yes(r#"isQuantity("10Mi") && !isQuantity("10MB") && !quantity("1500m").isInteger()"#);
    assert!(
        runtime_err(r#"device.capacity["dra.net"].cores.asInteger() == 1"#)
            .contains("no such key: cores")
    );
}

#[test]
fn lists_macros_and_operators() {
    yes(r#"0 in device.attributes["resource.kubernetes.io"].numaNodes"#);
    // Attribute values are declared `any`, which cel-go's checker does not range over: the
    // 1.34 and 1.36 schedulers refuse a comprehension over an attribute at compile time (with
    // the alpha DRAListTypeAttributes gate it would be `dyn`). `dyn()` opts in.
    for range in [
        "exists(n, n == 1)",
        "all(n, n == 1)",
        "map(n, n * 2) == [0, 2]",
    ] {
        let e = compile_err(&format!(
            r#"device.attributes["resource.kubernetes.io"].numaNodes.{range}"#
        ));
        assert!(
            e.contains("expression of type 'any' cannot be range of a comprehension"),
            "{range}: {e}"
        );
    }
    yes(r#"dyn(device.attributes["resource.kubernetes.io"].numaNodes).exists(n, n == 1)"#);
    no(r#"dyn(device.attributes["resource.kubernetes.io"].numaNodes).all(n, n == 1)"#);
    yes(
        r#"dyn(device.attributes["resource.kubernetes.io"].numaNodes).filter(n, n > 0).size() == 1"#,
    );
    yes(r#"[1, 2, 3].exists_one(x, x == 2) && size("abc") == 3"#);
    yes(r#"{"a": 1}["a"] == 1 && "a" in {"a": 1}"#);
    yes(r#"device.attributes["dra.net"].numaNode in [0, 1] ? true : false"#);
    yes(r#"1 + 2 * 3 == 7 && 7 / 2 == 3 && 7 % 2 == 1 && -(-1) == 1 && 2u == uint(2)"#);
    yes(r#""MLX5".lowerAscii() == "mlx5" && "mlx5_0".contains("_") && "mlx5".endsWith("5")"#);
    yes(r#"int("12") == 12 && string(12) == "12" && double(1) == 1.0 && uint(3) == 3u"#);
    yes(r#"'single' == "single" && r"\d" == "\\d" && 0x10 == 16"#);
    yes(r#"r"a"=="a""#);
}

#[test]
fn runtime_type_and_arithmetic_errors() {
    assert!(
        runtime_err(r#"device.attributes["dra.net"].numaNode < "1""#).contains("no such overload")
    );
    assert!(runtime_err("9223372036854775807 + 1 > 0").contains("overflow"));
    assert!(runtime_err("1 / 0 == 1").contains("division by zero"));
    assert!(
        runtime_err(r#"device.attributes["dra.net"].numaNode"#)
            .contains("CEL result of type int could not be converted to bool")
    );
    // Mixed-type equality is a compile error, as the API server reports it.
    assert!(compile_err("2u == 2").contains("found no matching overload for '_==_'"));
    yes("-9223372036854775808 < 0");
}

#[test]
fn compile_errors_say_what_and_where() {
    assert!(compile_err("device.driver ==").contains("mismatched input '<EOF>'"));
    assert!(compile_err(r#"dev.driver == "x""#).contains("undeclared reference to 'dev'"));
    // Regular expressions are part of the environment (RE2 syntax).
    yes(r#"device.driver.matches("^dra[.]net$")"#);
    no(r#"device.driver.matches("^x")"#);
    assert!(compile_err(r#"foo("x")"#).contains("undeclared reference to 'foo'"));
    assert!(compile_err(r#""unterminated"#).contains("token recognition error"));
    assert!(compile_err("1 + 2").contains("must evaluate to a bool"));
    assert!(compile_err(r#""x""#).contains("must evaluate to a bool"));
    assert!(compile_err("device.driver == 'x' )").contains("at offset 21"));
    assert!(compile_err(&"(".repeat(40)).contains("mismatched input '<EOF>'"));
    // Long but reasonable expressions still compile.
    yes(&format!("1{} == 100", " + 1".repeat(99)));
    yes(&format!("{}true{}", "(!!".repeat(10), ")".repeat(10)));
    // (-1 plus 99 ones is 98, then 13 more negations.) The deepest tree the limits allow
    // evaluates without exhausting a test thread's stack.
    let deepest = format!(
        "{}1{}{} == -98",
        "(-(-".repeat(7),
        " + 1".repeat(99),
        "))".repeat(7)
    );
    yes(&deepest);
    assert!(matches!(
        Program::compile(&"a".repeat(20_000)),
        Err(CelError::TooLong(20_000))
    ));
    // A stored selector has no such limit: the scheduler compiles it.
    let long = format!("\"{}\" != \"\"", "a".repeat(20_000));
    assert!(Program::compile_for_scheduler(&long).is_ok());
}

#[test]
fn duplicate_qualified_names_are_rejected() {
    let e = DeviceAttributes::new(
        "dra.net",
        [
            ("numaNode", AttributeValue::Int(0)),
            ("dra.net/numaNode", AttributeValue::Int(1)),
        ],
        [] as [(&str, Quantity); 0],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("dra.net/numaNode"), "{e}");
}

proptest::proptest! {
    /// Any text either compiles or is a syntax error, and evaluation never panics.
    #[test]
    fn arbitrary_text_never_panics(src in "\\PC{0,40}") {
        if let Ok(p) = Program::compile(&src) {
            let a = attrs();
            let v = DeviceView { driver: "dra.net", attributes: &a, allow_multiple_allocations: false };
            let _ = p.matches(&v);
        }
    }

    /// Expressions built from the grammar's pieces, so parsing gets past the first token.
    #[test]
    fn token_soup_never_panics(parts in proptest::collection::vec(proptest::sample::select(vec![
        "device", ".", "attributes", "[", "]", "\"dra.net\"", "numaNode", "==", "0", "(", ")",
        "&&", "||", "!", "-", "?", ":", "1u", "2.5", "'s'", "in", "[1]", "{", "}", ",", "has",
        "exists", "x", "size", "semver", "quantity", "\"1Gi\"", "9223372036854775808",
    ]), 0..14)) {
        let src = parts.join(" ");
        if let Ok(p) = Program::compile(&src) {
            let a = attrs();
            let v = DeviceView { driver: "dra.net", attributes: &a, allow_multiple_allocations: false };
            let _ = p.matches(&v);
        }
    }
}

#[test]
fn a_long_member_chain_is_a_compile_error_not_a_stack_overflow() {
    let chain = format!("{{\"a\":1}}{} == 1", ".a".repeat(2000));
    let e = Program::compile(&chain).unwrap_err().to_string();
    assert!(e.contains("recursion"), "{e}");
    // Ordinary selectors are far inside the limits.
    assert!(
        eval(r#"device.attributes["dra.net"].numaNode == 0 && device.attributes["dra.net"].rdma"#)
            .unwrap()
    );
}

#[test]
fn an_exploding_comprehension_is_stopped_with_an_error_naming_the_budget() {
    // 10^6+ steps: nested comprehensions over a 10-element list, five deep.
    let l = "[0,1,2,3,4,5,6,7,8,9]";
    let expr = format!(
        "{l}.all(a, {l}.all(b, {l}.all(c, {l}.all(d, {l}.all(e, {l}.all(f, a+b+c+d+e+f >= 0))))))"
    );
    // The API server refuses it before it is ever stored: its estimated cost is over the limit.
    match Program::compile(&expr) {
        Err(CelError::TooComplex { estimated, limit }) => assert!(estimated > limit),
        other => panic!("expected TooComplex, got {other:?}"),
    }
    // The scheduler makes no estimate; its runtime budget stops the evaluation.
    let a = attrs();
    let v = DeviceView {
        driver: "dra.net",
        attributes: &a,
        allow_multiple_allocations: false,
    };
    let e = Program::compile_for_scheduler(&expr)
        .unwrap()
        .matches(&v)
        .unwrap_err()
        .to_string();
    assert!(e.contains("steps"), "{e}");
    assert!(
        e.contains(&dranet_alloc::cel::MAX_EVAL_STEPS.to_string()),
        "{e}"
    );
}

/// Deep but legal selectors (within cel-go's limits of 250) compile and evaluate on the default
/// 2 MiB test thread stack of an unoptimised build: parser, checker and evaluator move to a new
/// stack segment instead of aborting the process.
#[test]
fn deep_legal_selectors_do_not_overflow_the_stack() {
    // 5,000 `!`: cel-go does not count unary operators; accepted here too.
    assert!(eval(&format!("{}true", "!".repeat(5000))).is_ok());
    // Nested comprehensions and ternaries just under the limit.
    let n = 200;
    let mut nested = "true".to_string();
    for i in 0..n {
        nested = format!("[1].exists(x{i}, {nested})");
    }
    yes(&nested);
    let ternary = format!("{}true", "false ? false : ".repeat(n));
    yes(&ternary);
}

#[test]
fn each_version_has_its_environments() {
    let sort = "[3, 1].sort() == [1, 3]";
    let e = Program::compile(sort).unwrap_err().to_string();
    assert!(
        e.contains("the 1.34 scheduler accepts this selector")
            && e.contains("CEL environment of Kubernetes 1.33"),
        "{e}"
    );
    assert!(Program::compile_at(sort, KubernetesVersion::V1_36).is_ok());
    let multi = "!device.allowMultipleAllocations";
    assert!(Program::compile(multi).is_err());
    assert!(Program::compile_at(multi, KubernetesVersion::V1_36).is_ok());

    let includes = r#"device.attributes["dra.net"].rdmaDevice.includes("mlx5_0")"#;
    assert!(Program::compile_for_scheduler(includes).is_err());
    let e = Program::compile_at(includes, KubernetesVersion::V1_36)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the 1.36 scheduler accepts this selector")
            && e.contains("CEL environment of Kubernetes 1.35"),
        "{e}"
    );
    let p = Program::compile_for_scheduler_at(includes, KubernetesVersion::V1_36).unwrap();
    assert_eq!(p.kube_version(), KubernetesVersion::V1_36);
    // 1.37 checks new selectors at 1.36, whose environment has `includes`, but its gate
    // (DRAListTypeAttributes) is still alpha and off: refused at creation, run when stored.
    let e = Program::compile_at(includes, KubernetesVersion::V1_37)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the 1.37 scheduler accepts this selector"),
        "{e}"
    );
    assert!(Program::compile_for_scheduler_at(includes, KubernetesVersion::V1_37).is_ok());
    assert!(Program::compile_at(sort, KubernetesVersion::V1_37).is_ok());
    assert!(Program::compile_at(multi, KubernetesVersion::V1_37).is_ok());
    let a = attrs();
    let v = DeviceView {
        driver: "dra.net",
        attributes: &a,
        allow_multiple_allocations: false,
    };
    assert_eq!(p.matches(&v), Ok(true));
}
