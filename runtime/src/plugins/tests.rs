//! Tests of plugin calls: binding, the Unknown rule, annotations, and the native plugins,
//! against std's real signatures (read from weft's std stub) and a fake host.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use weft_ir::ErrorKind;
use weft_ir::plugin::{ParamKind, PluginParam, PluginSignature, TypeAnnotation};
use weft_ir::value::{Reference, Value};

use super::{
    Call, Facts, FactsError, NativeModule, NativePlugin, NativeResult, PluginError, PluginHost, PluginRegistry,
    ReferenceType, RegistryError, call,
};
use crate::modules::{EmbeddedModules, Modules};

// ---------------------------------------------------------------------------------------
// std's signatures, from the stub the frontend reads.

const STD_STUB: &str = include_str!("../../../frontend/std/plugins/__init__.py");

/// Splits at commas outside brackets and strings.
fn split_top(text: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let mut current = String::new();
    for c in text.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '"' | '\'' => quote = Some(c),
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                c if c == sep && depth == 0 => {
                    parts.push(std::mem::take(&mut current));
                    continue;
                }
                _ => {}
            },
        }
        current.push(c);
    }
    parts.push(current);
    parts.into_iter().map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect()
}

fn annotation(text: &str) -> TypeAnnotation {
    let text = text.trim();
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(dsl) => TypeAnnotation::Dsl(dsl.to_string()),
        None => TypeAnnotation::Python(text.to_string()),
    }
}

/// A signature from Python parameter text (`string: "string", *args: "any"`).
fn signature(namespace: &str, name: &str, params: &str, returns: Option<&str>, allow_unknown: bool) -> PluginSignature {
    let mut out = Vec::new();
    let mut keyword_only = false;
    let mut takes_context = false;
    for param in split_top(params, ',') {
        if param == "*" {
            keyword_only = true;
            continue;
        }
        let (kind, rest) = if let Some(rest) = param.strip_prefix("**") {
            (ParamKind::VarKeyword, rest)
        } else if let Some(rest) = param.strip_prefix('*') {
            keyword_only = true;
            (ParamKind::VarPositional, rest)
        } else if keyword_only {
            (ParamKind::KeywordOnly, param.as_str())
        } else {
            (ParamKind::PositionalOrKeyword, param.as_str())
        };
        let (head, default) = match split_top(rest, '=').as_slice() {
            [head, default] => (head.clone(), Some(default.clone())),
            _ => (rest.to_string(), None),
        };
        let (pname, ann) = match head.split_once(':') {
            Some((n, a)) => (n.trim().to_string(), Some(annotation(a))),
            None => (head.trim().to_string(), None),
        };
        if ann == Some(TypeAnnotation::Python("Context".into())) {
            takes_context = true;
            continue;
        }
        out.push(PluginParam { name: pname, kind, annotation: ann, default });
    }
    PluginSignature {
        name: name.to_string(),
        namespace: namespace.to_string(),
        params: out,
        returns: returns.map(annotation),
        takes_context,
        context_position: 0,
        allow_unknown,
        emits_statements: false,
        deprecated: None,
        source_file: String::new(),
        source_line: 0,
    }
}

/// Every `@plugin` of the std stub.
fn std_signatures() -> HashMap<String, PluginSignature> {
    let lines: Vec<&str> = STD_STUB.lines().collect();
    let mut out = HashMap::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if !line.starts_with("@plugin") {
            i += 1;
            continue;
        }
        let decorator = line;
        let mut j = i + 1;
        while !lines[j].starts_with("def ") {
            j += 1;
        }
        let mut def = String::new();
        loop {
            def.push_str(lines[j].trim());
            def.push(' ');
            if lines[j].trim_end().ends_with(':') && def.matches('(').count() == def.matches(')').count() {
                break;
            }
            j += 1;
        }
        let fn_name = &def[4..def.find('(').unwrap()];
        let open = def.find('(').unwrap();
        let close = def.rfind(')').unwrap();
        let params = &def[open + 1..close];
        let returns = def[close + 1..].trim().strip_prefix("->").map(|r| r.trim().trim_end_matches(':').trim());
        let name =
            decorator.split('"').nth(1).filter(|_| decorator.starts_with("@plugin(\"")).unwrap_or(fn_name).to_string();
        let sig = signature("std", &name, params, returns, decorator.contains("allow_unknown=True"));
        out.insert(name, sig);
        i = j + 1;
    }
    out
}

thread_local! {
    static STD: HashMap<String, PluginSignature> = std_signatures();
}

fn std_sig(name: &str) -> PluginSignature {
    STD.with(|s| s.get(name).cloned()).unwrap_or_else(|| panic!("std::{name} is not in the stub"))
}

// ---------------------------------------------------------------------------------------
// A fake host.

struct FakeInstance {
    entity: &'static str,
    parents: Vec<&'static str>,
    attributes: Vec<(&'static str, Result<Value, PluginError>)>,
}

#[derive(Default)]
struct FakeHost {
    prints: Vec<String>,
    env: HashMap<String, String>,
    vars: HashMap<String, Result<Value, PluginError>>,
    instances: Vec<FakeInstance>,
    modules: Modules,
    facts: Option<Facts>,
    /// The namespace of the calling statement, when the host knows it.
    caller: Option<String>,
    /// The entities and typedefs of the model, when the host knows them.
    types: Option<Vec<&'static str>>,
    data_dir: Option<PathBuf>,
    registry: Option<PluginRegistry>,
}

impl PluginHost for FakeHost {
    fn print(&mut self, text: &str) {
        self.prints.push(text.to_string());
    }

    fn env_var(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }

    fn lookup(&mut self, name: &str) -> Result<Value, PluginError> {
        self.vars.get(name).cloned().unwrap_or_else(|| {
            Err(PluginError::Wrapped {
                kind: ErrorKind::NotFoundException,
                message: format!("variable {name} not found"),
            })
        })
    }

    fn attribute(&mut self, instance: u32, name: &str) -> Result<Value, PluginError> {
        let inst = &self.instances[instance as usize];
        inst.attributes.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone()).unwrap_or_else(|| {
            Err(PluginError::Wrapped {
                kind: ErrorKind::NotFoundException,
                message: format!("{} has no attribute {name}", inst.entity),
            })
        })
    }

    fn instance_type(&self, instance: u32) -> String {
        self.instances[instance as usize].entity.to_string()
    }

    fn is_instance_of(&self, instance: u32, entity: &str) -> bool {
        let inst = &self.instances[instance as usize];
        inst.entity == entity || inst.parents.contains(&entity)
    }

    fn instance_display(&self, instance: u32) -> String {
        format!("{} (instantiated at ./main.cf:{})", self.instances[instance as usize].entity, instance + 1)
    }

    fn modules(&self) -> &Modules {
        &self.modules
    }

    fn facts(&self) -> Option<&Facts> {
        self.facts.as_ref()
    }

    fn check_typedef(&mut self, name: &str, value: &Value) -> Result<bool, PluginError> {
        // `mymod::short`: a string of at most 3 characters.
        Ok(name == "mymod::short" && matches!(value, Value::Str(s) if s.chars().count() <= 3))
    }

    fn caller_namespace(&self) -> Option<String> {
        self.caller.clone()
    }

    fn type_exists(&self, name: &str) -> Option<bool> {
        self.types.as_ref().map(|types| types.contains(&name))
    }

    fn data_dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(|| PathBuf::from("data"))
    }

    fn registry(&self) -> &PluginRegistry {
        self.registry.as_ref().unwrap_or_else(|| PluginRegistry::builtin())
    }
}

fn optional_unset() -> Result<Value, PluginError> {
    Err(PluginError::Wrapped { kind: ErrorKind::OptionalValueException, message: "optional value not set".into() })
}

/// Instances: 0 a server, 1 the OS unix, 2 linux (family unix), 3 another server.
fn host() -> FakeHost {
    let server = |name: &str, port: i64| FakeInstance {
        entity: "__config__::Server",
        parents: vec!["std::Entity"],
        attributes: vec![
            ("name", Ok(Value::str(name))),
            ("port", Ok(Value::Int(port))),
            ("os", Ok(Value::Instance(2))),
            ("peer", optional_unset()),
            ("secret", Ok(env_ref("SECRET"))),
            ("late", Err(PluginError::Unset(42))),
            ("fact", Ok(Value::Unknown)),
        ],
    };
    let os = |name: &str, family: Result<Value, PluginError>| FakeInstance {
        entity: "std::OS",
        parents: vec!["std::Entity"],
        attributes: vec![("name", Ok(Value::str(name))), ("family", family), ("python_cmd", Ok(Value::str("python")))],
    };
    let mut host = FakeHost {
        instances: vec![
            server("web", 8080),
            os("unix", optional_unset()),
            os("linux", Ok(Value::Instance(1))),
            server("db", 5432),
        ],
        ..FakeHost::default()
    };
    host.env.insert("WEFT_TEST_SET".into(), "value".into());
    host.env.insert("WEFT_TEST_INT".into(), " 42 ".into());
    host.env.insert("WEFT_TEST_BAD_INT".into(), "4x".into());
    host
}

// ---------------------------------------------------------------------------------------
// Values.

fn s(text: &str) -> Value {
    Value::str(text)
}

fn i(v: i64) -> Value {
    Value::Int(v)
}

fn l(items: Vec<Value>) -> Value {
    Value::List(Arc::from(items))
}

fn d(entries: Vec<(&str, Value)>) -> Value {
    Value::Dict(entries.into_iter().map(|(k, v)| (Arc::from(k), v)).collect())
}

fn env_ref(name: &str) -> Value {
    Value::Reference(Arc::new(Reference {
        class: "EnvironmentReference".into(),
        module: "inmanta_plugins.std".into(),
        args: vec![("name".into(), s(name))],
    }))
}

const U: Value = Value::Unknown;
const NULL: Value = Value::NULL;

/// A result as text: `repr` of the value, or `Kind: message` of the error.
fn show(result: Result<Value, PluginError>, host: &FakeHost) -> String {
    match result {
        Ok(v) => super::pyfmt::dsl_repr(&v, host),
        Err(PluginError::External { class, message }) => format!("{class}: {message}"),
        Err(PluginError::Wrapped { kind, message }) => format!("Wrapped {}: {message}", kind.as_str()),
        Err(PluginError::Type { message: m, .. }) => format!("PluginTypeException: {m}"),
        Err(PluginError::Reference { message: m, .. }) => format!("Reference: {m}"),
        Err(PluginError::Runtime(m)) => format!("RuntimeException: {m}"),
        Err(PluginError::Explicit(m)) => format!("PluginException: {m}"),
        Err(PluginError::Unset(c)) => format!("Unset {c}"),
    }
}

fn run_sig(sig: &PluginSignature, args: Vec<Value>, kwargs: Vec<(&str, Value)>, host: &mut FakeHost) -> String {
    let kwargs = kwargs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let result = call(sig, args, kwargs, host);
    show(result, host)
}

fn run(name: &str, args: Vec<Value>, kwargs: Vec<(&str, Value)>, host: &mut FakeHost) -> String {
    run_sig(&std_sig(name), args, kwargs, host)
}

type Case = (&'static str, Vec<Value>, Vec<(&'static str, Value)>, &'static str);

/// Runs std plugin calls and compares each result's text.
fn check(cases: Vec<Case>) {
    let mut failures = Vec::new();
    for (name, args, kwargs, expected) in cases {
        let mut host = host();
        let shown = format!("std::{name}({args:?}, {kwargs:?})");
        let got = run(name, args, kwargs, &mut host);
        if got != expected {
            failures.push(format!("{shown}\n   got: {got}\n  want: {expected}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// Tests.

#[test]
fn every_std_plugin_of_the_stub_is_native() {
    let missing: Vec<String> = STD.with(|sigs| {
        let mut names: Vec<String> =
            sigs.keys().filter(|n| !super::has_native(&format!("std::{n}"))).cloned().collect();
        names.sort();
        names
    });
    assert!(missing.is_empty(), "std plugins without a native implementation: {missing:?}");
    // And the natives' own parameter lists (used for filter calls) match the stub.
    for native in super::std_plugins::all() {
        let sig = std_sig(native.name);
        let names: Vec<&str> = sig.params.iter().map(|p| p.name.as_str()).collect();
        let declared: Vec<String> = native_param_names(native.name);
        assert_eq!(names, declared, "parameters of std::{}", native.name);
        assert_eq!(sig.allow_unknown, native.allow_unknown, "allow_unknown of std::{}", native.name);
    }
}

fn native_param_names(name: &str) -> Vec<String> {
    let native = super::std_plugins::all().iter().find(|n| n.name == name).unwrap();
    native.parameter_names()
}

#[test]
fn binding_follows_the_reference() {
    check(vec![
        (
            "replace",
            vec![s("a"), s("b")],
            vec![],
            "RuntimeException: std::replace() missing 1 required positional argument: 'new'",
        ),
        (
            "replace",
            vec![],
            vec![],
            "RuntimeException: std::replace() missing 3 required positional arguments: 'string', 'old' and 'new'",
        ),
        (
            "replace",
            vec![s("a"), s("b"), s("c"), s("d")],
            vec![],
            "RuntimeException: std::replace() takes 3 positional arguments but 4 were given",
        ),
        (
            "len",
            vec![l(vec![]), l(vec![])],
            vec![],
            "RuntimeException: std::len() takes 1 positional arguments but 2 were given",
        ),
        (
            "replace",
            vec![s("abc")],
            vec![("old", s("a")), ("new", s("b")), ("count", i(1))],
            "RuntimeException: std::replace() got an unexpected keyword argument: 'count'",
        ),
        (
            "replace",
            vec![s("abc"), s("a"), s("b")],
            vec![("old", s("a"))],
            "RuntimeException: std::replace() got multiple values for argument 'old'",
        ),
        ("replace", vec![s("Hello World!")], vec![("new", s("Hi")), ("old", s("Hello"))], "'Hi World!'"),
        ("sequence", vec![i(3)], vec![], "[0, 1, 2]"),
        ("sequence", vec![i(2), i(10)], vec![], "[10, 11]"),
        ("sequence", vec![i(2)], vec![("start", i(-1))], "[-1, 0]"),
        ("format", vec![s("{}-{}"), s("a"), i(1)], vec![], "'a-1'"),
        ("format", vec![s("{name}:{port}")], vec![("name", s("web")), ("port", i(80))], "'web:80'"),
        ("get_env", vec![s("WEFT_TEST_UNSET"), s("fallback")], vec![], "'fallback'"),
        ("get_env", vec![s("WEFT_TEST_UNSET")], vec![], "Unknown"),
        ("get_env", vec![s("WEFT_TEST_SET")], vec![("default_value", s("x"))], "'value'"),
        ("assert", vec![Value::Bool(true)], vec![], "null"),
        ("assert", vec![Value::Bool(false), s("boom")], vec![], "AssertionError: Assertion error: boom"),
        ("assert", vec![Value::Bool(false)], vec![], "AssertionError: Assertion error: "),
    ]);
}

/// The fast path of positional-only calls (`bind::PositionalShape`) binds exactly as the
/// general checks do, and takes every call it can: for every std plugin and for signatures
/// with keyword-only, variadic and defaulted parameters, with up to two more arguments than
/// parameters, some of them Unknown or of the wrong type.
#[test]
fn positional_calls_bind_as_the_general_checks_do() {
    let mut signatures: Vec<PluginSignature> = STD.with(|sigs| sigs.values().cloned().collect());
    signatures.sort_by(|a, b| a.name.cmp(&b.name));
    for (name, params) in [
        ("defaults", r#"a: "string", b: "int" = 1, c: "string" = 'x'"#),
        ("keyword_only", r#"a: "string", *, b: "int""#),
        ("keyword_only_default", r#"a: "string", *, b: "int" = 2"#),
        ("varargs", r#"a: "string", *rest: "any""#),
        ("varkwargs", r#"a: "string" = 'd', **rest: "any""#),
        ("nothing", ""),
    ] {
        signatures.push(signature("t", name, params, None, false));
    }
    let mut fast = 0;
    for sig in &signatures {
        let mut host = host();
        let prepared = super::Prepared::new(sig, host.registry());
        let values = [s("text"), i(3), Value::Unknown];
        for count in 0..=sig.params.len() + 2 {
            for first in &values {
                let args: Vec<Value> = (0..count).map(|n| if n == 0 { first.clone() } else { s("v") }).collect();
                let general = super::bind::check_args_in_general(sig, &prepared, args.clone(), Vec::new(), &mut host);
                let chosen = super::bind::check_args(sig, &prepared, args.clone(), Vec::new(), &mut host);
                assert_eq!(
                    format!("{chosen:?}"),
                    format!("{general:?}"),
                    "{}::{} with {args:?}",
                    sig.namespace,
                    sig.name
                );
                fast += usize::from(general.is_ok());
            }
        }
    }
    // The comparison means something only if the calls bind at all.
    assert!(fast > 100, "only {fast} calls bound");
}

#[test]
fn unknown_arguments_skip_the_call_unless_allowed() {
    check(vec![
        ("upper", vec![U], vec![], "Unknown"),
        ("replace", vec![s("a")], vec![("old", U), ("new", s("b"))], "Unknown"),
        // Validation of the other arguments comes first.
        (
            "replace",
            vec![U, i(1), s("b")],
            vec![],
            "PluginTypeException: Value 1 for argument old of plugin std::replace has incompatible type. Expected type: string",
        ),
        ("is_unknown", vec![U], vec![], "True"),
        ("is_unknown", vec![i(1)], vec![], "False"),
        ("len", vec![l(vec![i(1), U])], vec![], "Unknown"),
        ("count", vec![l(vec![i(1), U])], vec![], "2"),
        ("at", vec![l(vec![i(1), U]), i(1)], vec![], "Unknown"),
        ("getattr", vec![U, s("name")], vec![("default_value", s("dflt"))], "'dflt'"),
        ("getattr", vec![Value::Instance(0), s("name")], vec![], "'web'"),
        ("getattr", vec![Value::Instance(0), s("nothing")], vec![("default_value", i(5))], "5"),
        ("getattr", vec![Value::Instance(0), s("fact")], vec![], "Unknown"),
        (
            "getattr",
            vec![Value::Instance(0), s("secret")],
            vec![],
            "<inmanta_plugins.std.EnvironmentReference object at <addr>>",
        ),
        ("inlineif", vec![Value::Bool(true), s("a"), U], vec![], "Unknown"),
    ]);
}

/// The error an argument's annotation raised, which the reference chains under the plugin
/// type error, as `Kind: message` (or `no cause`); the messages are the reference's
/// (inmanta-core 18.0.1, `caused by:` of `inmanta compile`).
fn argument_cause(name: &str, args: Vec<Value>) -> String {
    let mut host = host();
    match call(&std_sig(name), args, Vec::new(), &mut host) {
        Err(PluginError::Type { cause, .. } | PluginError::Reference { cause, .. }) => match cause {
            Some(cause) => format!("{}: {}", cause.kind.as_str(), cause.message),
            None => "no cause".into(),
        },
        other => format!("not a type error: {}", show(other, &host)),
    }
}

#[test]
fn refused_arguments_carry_the_reference_cause() {
    let object_reference = "UnexpectedReference: References are not allowed for values of type `object`. While the `object` Python type is technically compatible with any value, references are considered special DSL values and are therefore guarded so that they don't accidentally show up where they are not expected. To work with references, explicitly declare support with a `object | Reference` annotation.";
    let cases: Vec<(&str, Vec<Value>, &str)> = vec![
        ("replace", vec![i(1), s("a"), s("b")], "RuntimeException: Invalid value '1', expected string"),
        ("upper", vec![NULL], "RuntimeException: Invalid value 'null', expected string"),
        ("upper", vec![l(vec![s("a")])], "RuntimeException: Invalid value '['a']', expected string"),
        ("limit", vec![s("abc"), Value::Float(1.0)], "RuntimeException: Invalid value '1.0', expected int"),
        ("invert", vec![s("x")], "RuntimeException: Invalid value 'x', expected bool"),
        ("get_env", vec![s("X"), i(1)], "RuntimeException: Invalid value '1', expected string"),
        ("get_env_int", vec![s("X"), s("a")], "RuntimeException: Invalid value 'a', expected int"),
        ("select", vec![i(1), s("a")], "TypingException: Invalid value '1', expected list"),
        ("len", vec![d(vec![("a", i(1))])], "TypingException: Invalid value '{'a': 1}', expected None"),
        ("count", vec![s("abc")], "TypingException: Invalid value 'abc', expected None"),
        ("dict_keys", vec![l(vec![i(1)])], "RuntimeException: Invalid value '[1]', expected dict"),
        ("dict_get", vec![l(vec![i(1)]), s("a")], "RuntimeException: Invalid value '[1]', expected dict"),
        ("dict_keys", vec![d(vec![("a", env_ref("X"))])], object_reference),
        ("type", vec![env_ref("X")], object_reference),
        ("create_environment_reference", vec![i(1)], "RuntimeException: Invalid value '1', expected string"),
        (
            "familyof",
            vec![s("linux"), s("x")],
            "RuntimeException: Invalid type for value 'linux', should be type std::OS",
        ),
        (
            "familyof",
            vec![Value::Instance(0), s("x")],
            "RuntimeException: Invalid class type for __config__::Server (instantiated at ./main.cf:1), should be std::OS",
        ),
        (
            "limit",
            vec![s("abc"), env_ref("X")],
            "UnexpectedReference: References are not allowed for values of type `int`. To work with references, explicitly declare support with a `... | Reference[...]` annotation.",
        ),
        (
            "upper",
            vec![env_ref("X")],
            "UnexpectedReference: References are not allowed for values of type `string`. To work with references, explicitly declare support with a `... | Reference[...]` annotation.",
        ),
        // This host knows no typedef, so it can not say why a value fails std's; the
        // evaluator can (tests/conformance).
        ("prefixlen", vec![s("nope")], "no cause"),
    ];
    let failures: Vec<String> = cases
        .into_iter()
        .filter_map(|(name, args, expected)| {
            let shown = format!("std::{name}({args:?})");
            let got = argument_cause(name, args);
            (got != expected).then(|| format!("{shown}\n   got: {got}\n  want: {expected}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn arguments_are_validated_against_annotations() {
    let reference_message = "Reference: Value <inmanta_plugins.std.EnvironmentReference object at <addr>> for argument string of plugin std::upper is a reference. To allow references, use `| Reference[...]` in your type annotation.";
    check(vec![
        (
            "replace",
            vec![i(1), s("a"), s("b")],
            vec![],
            "PluginTypeException: Value 1 for argument string of plugin std::replace has incompatible type. Expected type: string",
        ),
        (
            "len",
            vec![d(vec![("a", i(1))])],
            vec![],
            "PluginTypeException: Value {'a': 1} for argument item_list of plugin std::len has incompatible type. Expected type: (Reference[any] | any)[]",
        ),
        ("upper", vec![env_ref("X")], vec![], reference_message),
        (
            "upper",
            vec![NULL],
            vec![],
            "PluginTypeException: Value null for argument string of plugin std::upper has incompatible type. Expected type: string",
        ),
        (
            "at",
            vec![l(vec![env_ref("X")]), i(0)],
            vec![],
            "<inmanta_plugins.std.EnvironmentReference object at <addr>>",
        ),
        (
            "dict_keys",
            vec![d(vec![("a", env_ref("X"))])],
            vec![],
            "Reference: Value {'a': <inmanta_plugins.std.EnvironmentReference object at <addr>>} for argument dct of plugin std::dict_keys contains a reference. To allow references, use `| Reference[...]` in your type annotation.",
        ),
        ("limit", vec![s("abc"), Value::Bool(true)], vec![], "'a'"),
        (
            "limit",
            vec![s("abc"), Value::Float(1.0)],
            vec![],
            "PluginTypeException: Value 1.0 for argument length of plugin std::limit has incompatible type. Expected type: int",
        ),
        (
            "familyof",
            vec![s("linux"), s("unix")],
            vec![],
            "PluginTypeException: Value 'linux' for argument member of plugin std::familyof has incompatible type. Expected type: std::OS",
        ),
        (
            "familyof",
            vec![Value::Instance(0), s("unix")],
            vec![],
            "PluginTypeException: Value __config__::Server (instantiated at ./main.cf:1) for argument member of plugin std::familyof has incompatible type. Expected type: std::OS",
        ),
        (
            "get_env",
            vec![s("X"), i(1)],
            vec![],
            "PluginTypeException: Value 1 for argument default_value of plugin std::get_env has incompatible type. Expected type: string?",
        ),
        ("prefixlen", vec![s("10.0.0.1")], vec![], "32"),
        (
            "prefixlen",
            vec![s("nope")],
            vec![],
            "PluginTypeException: Value 'nope' for argument addr of plugin std::prefixlen has incompatible type. Expected type: std::ipv_any_interface",
        ),
        (
            "server_token",
            vec![l(vec![s("agent"), i(1)])],
            vec![],
            "PluginTypeException: Value ['agent', 1] for argument client_types of plugin std::server_token has incompatible type. Expected type: string[]",
        ),
        (
            "create_environment_reference",
            vec![env_ref("X")],
            vec![],
            "<inmanta_plugins.std.EnvironmentReference object at <addr>>",
        ),
        (
            "create_environment_reference",
            vec![i(1)],
            vec![],
            "PluginTypeException: Value 1 for argument name of plugin std::create_environment_reference has incompatible type. Expected type: Reference[string] | string",
        ),
        ("is_unknown", vec![env_ref("X")], vec![], "False"),
        (
            "dict_get",
            vec![d(vec![("k", i(1))]), s("k")],
            vec![],
            "PluginTypeException: Return value 1 of plugin std::dict_get has incompatible type. Expected type: string",
        ),
    ]);
}

#[test]
fn python_annotations_resolve_like_the_reference() {
    let mut host = host();
    let cases: Vec<(&str, Value, &str)> = vec![
        ("int | None", NULL, "ok"),
        ("int | None", s("a"), "int?"),
        ("typing.Optional[str]", i(1), "string?"),
        ("list[str]", l(vec![s("a"), i(1)]), "string[]"),
        ("dict[str, int]", d(vec![("a", s("b"))]), "dict[string, int]"),
        ("Mapping[str, int]", d(vec![("a", i(1))]), "ok"),
        ("dict", l(vec![]), "dict[string, any]"),
        ("Sequence", d(vec![]), "list"),
        ("str | int", Value::Float(1.0), "Union[string,int]"),
        ("str | int | None", NULL, "ok"),
        ("str | int | None", Value::Float(1.0), "Union[string,int]?"),
        ("float", i(1), "float"),
        ("numbers.Number", Value::Bool(true), "ok"),
        ("object", Value::Instance(0), "ok"),
        ("typing.Any", env_ref("X"), "reference"),
        ("Reference[str]", env_ref("X"), "ok"),
        ("Reference[str]", s("x"), "Reference[string]"),
        ("Reference[int]", env_ref("X"), "Reference[int]"),
        ("str | Reference[str]", env_ref("X"), "ok"),
        ("object | Reference", env_ref("X"), "ok"),
        ("list[object | Reference]", l(vec![env_ref("X")]), "ok"),
        ("list[object]", l(vec![env_ref("X")]), "reference"),
        ("typing.Annotated[object, ModelType[\"std::Entity\"]]", s("x"), "std::Entity"),
        ("typing.Annotated[object, ModelType[\"std::Entity\"]]", Value::Instance(0), "ok"),
        ("MyDataclass", i(1), "ok"),
        ("None", i(1), "null"),
    ];
    let mut failures = Vec::new();
    for (ann, value, expected) in cases {
        let sig = signature("mymod", "f", &format!("x: {ann}"), Some("int"), false);
        let got = run_sig(&sig, vec![value.clone()], vec![], &mut host);
        let ok = match expected {
            "ok" => got.starts_with("NotImplementedError"),
            "reference" => got.starts_with("Reference:"),
            ty => got.ends_with(&format!("has incompatible type. Expected type: {ty}")),
        };
        if !ok {
            failures.push(format!("{ann} with {value:?}: {got}"));
        }
    }
    // DSL annotations of user plugins: typedefs through the host, entities by instance.
    for (ann, value, ok) in [
        ("\"mymod::short\"", s("abc"), true),
        ("\"mymod::short\"", s("abcd"), false),
        ("\"short\"", s("abc"), true),
        ("\"std::Entity\"", Value::Instance(0), true),
        ("\"std::Entity[]\"", l(vec![Value::Instance(0), s("x")]), false),
        ("\"float\"", i(1), false),
        ("\"number\"", i(1), true),
        ("\"std::port\"", i(80), true),
        ("\"std::port\"", i(70000), false),
        ("\"std::ipv4_address\"", s("10.0.0.1"), true),
        ("\"std::alfanum\"", s("ab1"), true),
        ("\"std::alfanum\"", s("ab-1"), false),
    ] {
        let sig = signature("mymod", "f", &format!("x: {ann}"), None, false);
        let got = run_sig(&sig, vec![value.clone()], vec![], &mut host);
        if got.starts_with("NotImplementedError") != ok {
            failures.push(format!("{ann} with {value:?}: {got}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // A plugin without a native implementation fails only when it runs.
    let sig = signature("mymod", "f", "x: int", None, false);
    assert_eq!(run_sig(&sig, vec![U], vec![], &mut host), "Unknown");
    assert_eq!(
        run_sig(&sig, vec![i(1)], vec![], &mut host),
        "NotImplementedError: plugin mymod::f has no native implementation in weft"
    );
}

#[test]
fn defaults_are_read_from_python_source() {
    let host = host();
    for (text, expected) in [
        ("None", "null"),
        ("\"x\\ty\"", "'x\\ty'"),
        ("'it\\'s'", "\"it's\""),
        ("-1.5", "-1.5"),
        ("20", "20"),
        ("0x10", "16"),
        ("[1, \"a\", True]", "[1, 'a', True]"),
        ("{\"k\": (1, 2)}", "{'k': [1, 2]}"),
        ("[\"agent\"]", "['agent']"),
        ("SOME_CONSTANT", "null"),
    ] {
        assert_eq!(super::pyfmt::dsl_repr(&super::bind::parse_default(text), &host), expected, "{text}");
    }
}

#[test]
fn print_writes_python_str() {
    let mut host = host();
    for value in [
        s("text"),
        Value::Bool(true),
        NULL,
        Value::Float(2.0),
        Value::Float(0.1 + 0.2),
        l(vec![i(1), s("a"), Value::Bool(true), NULL]),
        d(vec![("k", i(1))]),
        Value::int(num_bigint::BigInt::from(2).pow(64)),
        Value::Instance(0),
        l(vec![l(vec![i(1)]), Value::Instance(3)]),
        env_ref("X"),
    ] {
        assert_eq!(run("print", vec![value], vec![], &mut host), "null");
    }
    assert_eq!(
        host.prints,
        [
            "text",
            "True",
            "None",
            "2.0",
            "0.30000000000000004",
            "@[1, 'a', True, null]",
            "@{'k': 1}",
            "18446744073709551616",
            "__config__::Server (instantiated at ./main.cf:1)",
            "@[[1], __config__::Server (instantiated at ./main.cf:4)]",
            "<inmanta_plugins.std.EnvironmentReference object at <addr>>",
        ]
    );
}

#[test]
fn std_plugins_behave_like_python() {
    let server = Value::Instance(0);
    let db = Value::Instance(3);
    check(vec![
        // Strings.
        ("upper", vec![s("straße")], vec![], "'STRASSE'"),
        ("lower", vec![s("ÀB")], vec![], "'àb'"),
        ("capitalize", vec![s("hELLO wORLD")], vec![], "'Hello world'"),
        ("length", vec![s("héé")], vec![], "3"),
        ("limit", vec![s("abcdef"), i(-2)], vec![], "'abcd'"),
        ("limit", vec![s("abc"), i(10)], vec![], "'abc'"),
        ("split", vec![s("a,b,c"), s(",")], vec![], "['a', 'b', 'c']"),
        ("split", vec![s("a"), s("")], vec![], "ValueError: empty separator"),
        ("replace", vec![s("abc"), s(""), s("-")], vec![], "'-a-b-c-'"),
        ("hostname", vec![s("web.example.com")], vec![], "'web'"),
        ("format", vec![s("{0}{1}{0}"), s("a"), s("b")], vec![], "'aba'"),
        ("format", vec![s("{:>5}|{:.2f}|{!r}"), s("a"), Value::Float(1.0 / 3.0), s("q")], vec![], "\"    a|0.33|'q'\""),
        (
            "format",
            vec![s("{x[k]} {y[1]} {s.name}")],
            vec![("x", d(vec![("k", s("v"))])), ("y", l(vec![i(1), i(2)])), ("s", server.clone())],
            "'v 2 web'",
        ),
        (
            "format",
            vec![s("{} {}"), i(1)],
            vec![],
            "IndexError: Replacement index 1 out of range for positional args tuple",
        ),
        ("format", vec![s("{missing}")], vec![], "KeyError: 'missing'"),
        (
            "format",
            vec![s("{} {0}"), i(1)],
            vec![],
            "ValueError: cannot switch from automatic field numbering to manual field specification",
        ),
        ("format", vec![s("{{}} {")], vec![], "ValueError: Single '{' encountered in format string"),
        ("format", vec![s("{}"), l(vec![NULL])], vec![], "'@[null]'"),
        ("format", vec![s("{}"), U], vec![], "Unknown"),
        // Collections.
        ("at", vec![l(vec![s("a")]), i(5)], vec![], "IndexError: list index out of range"),
        ("at", vec![l(vec![s("a"), s("b")]), i(-1)], vec![], "'b'"),
        ("item", vec![l(vec![l(vec![i(1), i(2)]), l(vec![i(3), i(4)])]), i(1)], vec![], "[2, 4]"),
        (
            "item",
            vec![l(vec![d(vec![("a", i(1))])]), i(0)],
            vec![],
            "AttributeError: 'dict' object has no attribute 'get_attribute'",
        ),
        ("dict_keys", vec![d(vec![("b", i(1)), ("a", i(2))])], vec![], "['b', 'a']"),
        ("dict_get", vec![d(vec![("k", s("v"))]), s("k")], vec![], "'v'"),
        ("dict_get", vec![d(vec![("k", s("v"))]), s("x")], vec![], "KeyError: 'x'"),
        ("contains", vec![d(vec![("k", s("v"))]), s("k")], vec![], "True"),
        ("flatten", vec![l(vec![l(vec![i(1)]), l(vec![i(2), i(3)]), l(vec![])])], vec![], "[1, 2, 3]"),
        ("flatten", vec![l(vec![i(1)])], vec![], "TypeError: 'int' object is not iterable"),
        ("unique", vec![l(vec![i(1), s("1"), Value::Float(2.0)])], vec![], "True"),
        ("unique", vec![l(vec![i(1), Value::Bool(true)])], vec![], "False"),
        ("unique", vec![l(vec![l(vec![])])], vec![], "TypeError: unhashable type: 'list'"),
        (
            "filter",
            vec![l(vec![server.clone(), db.clone()]), server.clone()],
            vec![],
            "[__config__::Server (instantiated at ./main.cf:4)]",
        ),
        ("select", vec![l(vec![server.clone(), db.clone()]), s("name")], vec![], "['web', 'db']"),
        (
            "select",
            vec![l(vec![server.clone()]), s("secret")],
            vec![],
            "Wrapped UnexpectedReference: Encountered unexpected reference value during plugin execution. Plugins are only allowed to access reference values when declared explicitly. Either use a dataclass entity that supports references (e.g. `int | Reference[int]` attribute annotation), or explicitly allow references on attribute access with the `inmanta.plugins.allow_reference_values()` wrapper. Encountered at objects[0].secret (= `<inmanta_plugins.std.EnvironmentReference object at <addr>>`).",
        ),
        ("select", vec![l(vec![server.clone()]), s("late")], vec![], "Unset 42"),
        (
            "key_sort",
            vec![l(vec![server.clone(), db.clone()]), s("port")],
            vec![],
            "[__config__::Server (instantiated at ./main.cf:4), __config__::Server (instantiated at ./main.cf:1)]",
        ),
        (
            "key_sort",
            vec![l(vec![server.clone(), db.clone()]), s("os.name")],
            vec![],
            "[__config__::Server (instantiated at ./main.cf:1), __config__::Server (instantiated at ./main.cf:4)]",
        ),
        (
            "attr",
            vec![server.clone(), s("secret")],
            vec![],
            "<inmanta_plugins.std.EnvironmentReference object at <addr>>",
        ),
        ("attr", vec![server.clone(), s("nothing")], vec![], "AttributeError: (None, 'nothing')"),
        ("isset", vec![NULL], vec![], "False"),
        ("invert", vec![Value::Bool(false)], vec![], "True"),
        ("equals", vec![i(1), Value::Float(1.0)], vec![], "null"),
        ("equals", vec![i(1), i(2)], vec![("desc", s("why"))], "AssertionError: 1 != 2: why"),
        // Instances.
        ("familyof", vec![Value::Instance(2), s("linux")], vec![], "True"),
        // The reference's loop stops at the first OS without a family before comparing it.
        ("familyof", vec![Value::Instance(2), s("unix")], vec![], "False"),
        ("familyof", vec![Value::Instance(1), s("windows")], vec![], "False"),
        ("is_instance", vec![server.clone(), s("std::Entity")], vec![], "True"),
        ("is_instance", vec![server.clone(), s("std::OS")], vec![], "False"),
        // Serialization.
        (
            "json_dumps",
            vec![d(vec![("b", l(vec![i(1), i(2)])), ("a", s("x"))])],
            vec![],
            "'{\"b\": [1, 2], \"a\": \"x\"}'",
        ),
        (
            "json_dumps",
            vec![l(vec![s("é\n"), NULL, Value::Float(1e16), Value::Bool(false)])],
            vec![],
            "'[\"\\\\u00e9\\\\n\", null, 1e+16, false]'",
        ),
        (
            "json_dumps",
            vec![l(vec![server.clone()])],
            vec![],
            "TypeError: __config__::Server (instantiated at ./main.cf:1) is not JSON serializable",
        ),
        (
            "json_loads",
            vec![s("{\"k\": [true, null], \"n\": 1.5, \"b\": 123456789012345678901234567890}")],
            vec![],
            "{'k': [True, null], 'n': 1.5, 'b': 123456789012345678901234567890}",
        ),
        ("json_loads", vec![s("{\"a\": 1, \"b\": 2, \"a\": 3}")], vec![], "{'a': 3, 'b': 2}"),
        ("json_loads", vec![s("[1,")], vec![], "JSONDecodeError: Expecting value: line 1 column 4 (char 3)"),
        ("json_loads", vec![s("{} x")], vec![], "JSONDecodeError: Extra data: line 1 column 4 (char 3)"),
        ("json_loads", vec![s("\"\\ud83d\\ude00\"")], vec![], "'😀'"),
        // Environment.
        ("get_env_int", vec![s("WEFT_TEST_INT")], vec![], "42"),
        ("get_env_int", vec![s("WEFT_TEST_UNSET")], vec![("default_value", i(7))], "7"),
        (
            "get_env_int",
            vec![s("WEFT_TEST_BAD_INT")],
            vec![],
            "ValueError: invalid literal for int() with base 10: '4x'",
        ),
        (
            "environment",
            vec![],
            vec![],
            "Exception: The environment of this model should be configured in config>environment",
        ),
        ("server_port", vec![], vec![], "8888"),
        // Types.
        ("is_base64_encoded", vec![s("aGVsbG8=")], vec![], "True"),
        ("is_base64_encoded", vec![s("aGVsbG8")], vec![], "False"),
        ("is_base64_encoded", vec![s("")], vec![], "True"),
        ("unique_file", vec![s("pre-"), s("seed"), s(".txt")], vec![], "'pre-fe4c0f30aa359c41d9f9a5f69c8c4192.txt'"),
        // Networks.
        ("prefixlen", vec![s("192.168.1.100/24")], vec![], "24"),
        ("network_address", vec![s("192.168.1.100/24")], vec![], "'192.168.1.0'"),
        ("netmask", vec![s("192.168.1.100/24")], vec![], "'255.255.255.0'"),
        ("netmask", vec![s("fd00::1/64")], vec![], "'ffff:ffff:ffff:ffff::'"),
        ("ipindex", vec![s("192.168.1.0/24"), i(2)], vec![], "'192.168.1.2'"),
        ("ipindex", vec![s("192.168.1.0/24"), i(-1), Value::Bool(true)], vec![], "'192.168.1.255/24'"),
        ("ipindex", vec![s("192.168.1.0/30"), i(4)], vec![], "IndexError: address out of range"),
        ("add_to_ip", vec![s("10.0.0.255"), i(1)], vec![], "'10.0.1.0'"),
        ("add_to_ip", vec![s("fd00::ffff"), i(1)], vec![], "'fd00::1:0'"),
        ("ip_address_from_interface", vec![s("fd00::1/64")], vec![], "'fd00::1'"),
        ("prefixlength_to_netmask", vec![i(20)], vec![], "'255.255.240.0'"),
        // References.
        ("create_int_reference", vec![env_ref("PORT")], vec![], "<inmanta_plugins.std.IntReference object at <addr>>"),
        (
            "create_environment_reference",
            vec![s("X")],
            vec![],
            "<inmanta_plugins.std.EnvironmentReference object at <addr>>",
        ),
    ]);
}

#[test]
fn validate_type_follows_pydantic() {
    let params = |entries: Vec<(&str, Value)>| Some(d(entries));
    let cases: Vec<(&str, Value, Option<Value>, &str)> = vec![
        ("pydantic.conint", i(80), params(vec![("ge", i(1)), ("le", i(65535))]), "True"),
        ("pydantic.conint", i(0), params(vec![("ge", i(1)), ("le", i(65535))]), "False"),
        ("pydantic.conint", Value::Bool(true), params(vec![("strict", Value::Bool(true))]), "False"),
        ("pydantic.conint", s("1_000"), None, "True"),
        ("pydantic.conint", s("5.5"), None, "False"),
        ("pydantic.conint", i(7), params(vec![("multiple_of", i(3))]), "False"),
        (
            "pydantic.conint",
            i(7),
            params(vec![("gt", Value::Float(6.5))]),
            "SchemaError: Error building \"int\" validator:\n  ValueError: 'gt' must be coercible to an integer",
        ),
        ("pydantic.confloat", Value::Float(0.3), params(vec![("multiple_of", Value::Float(0.1))]), "True"),
        ("pydantic.confloat", s("1e3"), params(vec![("le", i(1000))]), "True"),
        ("pydantic.constr", s("abc"), params(vec![("regex", s("b"))]), "False"),
        ("pydantic.constr", s("abc"), params(vec![("pattern", s("b"))]), "True"),
        ("pydantic.constr", s("abc\n"), params(vec![("regex", s("^[a-z]*$"))]), "True"),
        ("pydantic.constr", s("abc"), params(vec![("min_length", i(4))]), "False"),
        (
            "pydantic.constr",
            s("abc"),
            params(vec![("curtail_length", i(4))]),
            "TypeError: constr() got an unexpected keyword argument 'curtail_length'",
        ),
        ("pydantic.condecimal", s("1.234"), params(vec![("max_digits", i(3))]), "False"),
        ("pydantic.condecimal", s("1.23"), params(vec![("max_digits", i(3)), ("decimal_places", i(2))]), "True"),
        ("pydantic.PositiveInt", i(1), params(vec![("ge", i(1))]), "False"),
        ("pydantic.PositiveInt", s(" 3 "), None, "True"),
        ("pydantic.PositiveFloat", Value::Float(f64::NAN), None, "False"),
        ("pydantic.StrictFloat", i(1), None, "True"),
        ("foo.Bar", s("a"), None, "False"),
        ("datetime.date", s("2020-01-01"), None, "True"),
        ("datetime.date", s("2020-02-30"), None, "False"),
        ("datetime.date", s("2020-01-01T00:00:00Z"), None, "True"),
        ("datetime.date", s("2020-01-01T01:00:00"), None, "False"),
        ("datetime.date", i(1577836800), None, "True"),
        ("datetime.time", s("12:30:15.1234567"), None, "True"),
        ("datetime.time", s("12:30:15+01"), None, "False"),
        ("datetime.time", s("24:00"), None, "False"),
        ("datetime.datetime", s("2020-01-01_12:30"), None, "True"),
        ("datetime.datetime", s("2020-01-01T12"), None, "False"),
        ("datetime.datetime", s("-1577836800"), None, "True"),
        ("uuid.UUID", s("{12345678-1234-5678-1234-567812345678}"), None, "True"),
        ("uuid.UUID", s("12345678-12345678-1234-567812345678"), None, "False"),
        ("ipaddress.IPv4Interface", s("1.2.3.4/0.0.0.255"), None, "True"),
        ("ipaddress.IPv4Network", s("10.0.0.1/8"), None, "False"),
        ("ipaddress.IPv6Address", s("fe80::1%eth0"), None, "True"),
        ("pydantic.IPvAnyNetwork", s("::/64"), None, "True"),
        ("pydantic.EmailStr", s("Jane <a@example.com>"), None, "True"),
        ("pydantic.EmailStr", s("a@example.test"), None, "False"),
        ("pydantic.EmailStr", s("a@example.com1"), None, "False"),
        ("pydantic.EmailStr", s("a..b@example.com"), None, "False"),
        ("pydantic.NameEmail", s("Jane jane@example.org"), None, "False"),
        ("pydantic.AnyUrl", s("foo:bar"), None, "True"),
        ("pydantic.AnyUrl", s("http://"), None, "False"),
        ("pydantic.AnyUrl", s("http://256.1.1.1"), None, "False"),
        ("pydantic.AnyUrl", s("http://1.2.3"), None, "True"),
        ("pydantic.AnyUrl", s("http://x:99999"), None, "False"),
        ("pydantic.AnyUrl", s("http://x%20y"), None, "False"),
        ("pydantic.AnyHttpUrl", s("ftp://x"), None, "False"),
        ("pydantic.HttpUrl", s("https://example.org/path"), None, "True"),
        ("pydantic.AnyUrl", s("file://@/x"), None, "False"),
        ("pydantic.EmailStr", s("Jane < a@example.org>"), None, "True"),
        ("pydantic.EmailStr", s("J/a]e <a@example.org>"), None, "False"),
        ("pydantic.EmailStr", s("a@example.org\n"), None, "False"),
        ("pydantic.conint", s("5."), None, "False"),
        ("pydantic.conint", Value::Float(1e300), None, "False"),
        ("pydantic.confloat", s("1__0"), None, "False"),
    ];
    let mut failures = Vec::new();
    for (ty, value, params, expected) in cases {
        let mut host = host();
        let mut args = vec![s(ty), value.clone()];
        args.extend(params);
        let got = run("validate_type", args, vec![], &mut host);
        if got != expected {
            failures.push(format!("{ty}({value:?}): got {got}, want {expected}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// Templates and files.

/// A module directory with the given files (a path ending in `/` is an empty directory),
/// removed when dropped.
struct TempModule {
    root: PathBuf,
}

impl TempModule {
    fn new(files: &[(&str, &str)]) -> TempModule {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("weft-plugins-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        for (path, content) in files {
            let file = root.join(path);
            if path.ends_with('/') {
                std::fs::create_dir_all(file).unwrap();
                continue;
            }
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, content).unwrap();
        }
        TempModule { root }
    }
}

/// Where the modules of a test come from: their directories, or the embedded form an artifact
/// carries (after a round trip through the artifact's codec).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Backing {
    Directory,
    Embedded,
}

impl Backing {
    fn modules(self, dirs: &[(&str, &TempModule)]) -> Modules {
        let modules = Modules::from_dirs(dirs.iter().map(|(name, m)| (name.to_string(), m.root.clone())).collect());
        match self {
            Backing::Directory => modules,
            Backing::Embedded => {
                let embedded = modules.embed().unwrap();
                let config = bincode::config::standard();
                let bytes = bincode::serde::encode_to_vec(&embedded, config).unwrap();
                let (decoded, _): (EmbeddedModules, usize) = bincode::serde::decode_from_slice(&bytes, config).unwrap();
                assert_eq!(decoded, embedded);
                Modules::from_embedded(decoded)
            }
        }
    }

    /// How messages and `std::file` name `relative` in module `name`.
    fn path(self, name: &str, module: &TempModule, relative: &str) -> String {
        match self {
            Backing::Directory => module.root.join(relative).display().to_string(),
            Backing::Embedded => format!("/weft/modules/{name}/{relative}"),
        }
    }
}

impl Drop for TempModule {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[test]
fn templates_render_like_jinja2_from_directories() {
    templates_and_files(Backing::Directory);
}

#[test]
fn templates_render_like_jinja2_from_embedded_modules() {
    templates_and_files(Backing::Embedded);
}

/// The same templates and files give the same results from a directory and embedded, except
/// for the paths the module's files are named by.
fn templates_and_files(backing: Backing) {
    let module = TempModule::new(&[
        ("templates/server.j2", "server {{ name }} listens on {{ port }}\n"),
        ("templates/loop.j2", "{% for n in names | sort %}[{{ n | std.upper }}]{% endfor %}"),
        ("templates/kw.j2", "{{ who }} x {{ n }}"),
        ("templates/ns.j2", "{{ tpl.greeting }}"),
        ("templates/ignored.j2", "{{ ignored }}"),
        (
            "templates/inst.j2",
            "{{ s.name }}:{{ s.port }} on {{ s.os.name }}|{{ s.nothing }}|{{ s.peer }}|{% if s.peer %}x{% else %}no peer{% endif %}",
        ),
        ("templates/values.j2", "{{ t }} {{ n }} {{ f }} {{ l }} {{ dct }} {{ l[1] }} {{ [1, none] }} {{ 7 / 2 }}"),
        (
            "templates/items.j2",
            "{% for k, v in dct.items() %}{{ k }}={{ v }};{% endfor %}{{ dct.keys() | list | length }}",
        ),
        ("templates/late.j2", "{{ late }}"),
        ("templates/unknown.j2", "{{ unknown }}"),
        ("templates/secret.j2", "{{ secret }}"),
        ("templates/inst_secret.j2", "{{ s.secret }}"),
        ("templates/include.j2", "<{% include 'tpl/kw.j2' %}>"),
        (
            "templates/filters.j2",
            "{{ 'a,b' | std.split(',') | length }} {{ 3 | std.sequence | std.len }} {{ 'x' | std.upper(1) }}",
        ),
        ("templates/bad.j2", "{% for x in %}"),
        ("templates/crlf.j2", "a\r\nb"),
        ("templates/self.j2", "{{ self }} {{ name.upper() }} {{ ' x '.strip() }} {{ dct.get('zz', 0) }}"),
        ("templates/self_attr.j2", "{{ self.name }}"),
        ("files/data.txt", "static file content\n"),
        ("files/crlf.txt", "a\r\nb\rc"),
        ("files/sub/b.txt", "b"),
        ("files/sub/a.txt", "a"),
        ("files/sub/deeper/c.txt", "c"),
        ("files/empty/", ""),
        ("plugins/__init__.py", "# not a template"),
    ]);
    std::fs::write(module.root.join("files/latin1.txt"), b"caf\xe9").unwrap();
    let mut host = host();
    host.modules = backing.modules(&[("tpl", &module)]);
    let path = |relative: &str| backing.path("tpl", &module, relative);
    let vars: Vec<(&str, Value)> = vec![
        ("name", s("web")),
        ("port", i(8080)),
        ("names", l(vec![s("b"), s("a"), s("c")])),
        ("ignored", s("not used")),
        ("s", Value::Instance(0)),
        ("self", Value::Instance(0)),
        ("t", Value::Bool(true)),
        ("n", NULL),
        ("f", Value::Float(2.0)),
        ("l", l(vec![s("a"), NULL])),
        ("dct", d(vec![("b", i(1)), ("a", i(2))])),
        ("unknown", U),
        ("secret", env_ref("X")),
    ];
    for (k, v) in vars {
        host.vars.insert(k.to_string(), Ok(v));
    }
    host.vars.insert("late".into(), Err(PluginError::Unset(7)));
    type TemplateCase = (&'static str, Vec<(&'static str, Value)>, &'static str);
    let cases: Vec<TemplateCase> = vec![
        ("tpl/server.j2", vec![], "'server web listens on 8080'"),
        ("tpl/loop.j2", vec![], "'[A][B][C]'"),
        ("tpl/kw.j2", vec![("who", s("kwarg")), ("n", i(3))], "'kwarg x 3'"),
        ("tpl/ignored.j2", vec![("who", s("kwarg"))], "Wrapped NotFoundException: 'ignored' is undefined"),
        ("tpl/ns.j2", vec![], "Wrapped NotFoundException: 'tpl' is undefined"),
        ("tpl/nope.j2", vec![], "TemplateNotFound: tpl/nope.j2"),
        ("other/x.j2", vec![], "TemplateNotFound: other/x.j2"),
        ("tpl/inst.j2", vec![], "'web:8080 on linux|||no peer'"),
        ("tpl/values.j2", vec![], "\"True None 2.0 @['a', null] @{'b': 1, 'a': 2} None [1, None] 3.5\""),
        ("tpl/items.j2", vec![], "'b=1;a=2;2'"),
        ("tpl/late.j2", vec![], "Unset 7"),
        ("tpl/unknown.j2", vec![], "Unknown"),
        (
            "tpl/secret.j2",
            vec![],
            "PluginException: Encountered reference in Jinja template for variable secret (= `<inmanta_plugins.std.EnvironmentReference object at <addr>>`)",
        ),
        ("tpl/include.j2", vec![("who", s("w")), ("n", i(1))], "'<w x 1>'"),
        ("tpl/filters.j2", vec![], "TypeError: upper() takes 1 positional argument but 2 were given"),
        ("tpl/crlf.j2", vec![], "'a\\nb'"),
        // `self` is Jinja2's reference to the template, even in an implementation.
        ("tpl/self.j2", vec![], "\"<TemplateReference 'self.j2'> WEB x 0\""),
        (
            "tpl/self_attr.j2",
            vec![],
            "Wrapped NotFoundException: 'jinja2.runtime.TemplateReference object' has no attribute 'name'",
        ),
    ];
    let mut failures = Vec::new();
    for (path, kwargs, expected) in cases {
        let got = run("template", vec![s(path)], kwargs, &mut host);
        if got != expected {
            failures.push(format!("{path}: got {got}, want {expected}"));
        }
    }
    let got = run("template", vec![s("tpl/inst_secret.j2")], vec![], &mut host);
    if !got.starts_with("Wrapped UnexpectedReference: ")
        || !got.ends_with("Encountered at secret (= `<inmanta_plugins.std.EnvironmentReference object at <addr>>`).")
    {
        failures.push(format!("inst_secret: {got}"));
    }
    let got = run("template", vec![s("tpl/bad.j2")], vec![], &mut host);
    if !got.starts_with("TemplateSyntaxError: ") {
        failures.push(format!("bad: {got}"));
    }
    // Files.
    for (name, file, expected) in [
        ("source", "tpl/data.txt", "'static file content\\n'".to_string()),
        ("source", "tpl/./sub//a.txt", "'a'".to_string()),
        ("source", "tpl/sub/deeper/../b.txt", "'b'".to_string()),
        ("source", "tpl/crlf.txt", "'a\\nb\\nc'".to_string()),
        (
            "source",
            "tpl/latin1.txt",
            format!("UnicodeDecodeError: 'utf-8' codec can't decode {}", path("files/latin1.txt")),
        ),
        (
            "source",
            "tpl/missing.txt",
            format!("Exception: tpl/missing.txt isn't a valid file ({})", path("files/missing.txt")),
        ),
        ("source", "tpl/sub", format!("Exception: tpl/sub isn't a valid file ({})", path("files/sub"))),
        ("source", "nomod/x", "Exception: Module nomod does not exist for path nomod/x".to_string()),
        ("source", "/x", "Exception: Module  does not exist for path /x".to_string()),
        ("list_files", "tpl/sub", "['a.txt', 'b.txt']".to_string()),
        ("list_files", "tpl/sub/", "['a.txt', 'b.txt']".to_string()),
        ("list_files", "tpl/empty", "[]".to_string()),
        ("list_files", "tpl", "['crlf.txt', 'data.txt', 'latin1.txt']".to_string()),
        (
            "list_files",
            "tpl/nope",
            format!("FileNotFoundError: [Errno 2] No such file or directory: '{}'", path("files/nope")),
        ),
        (
            "list_files",
            "tpl/data.txt",
            format!("NotADirectoryError: [Errno 20] Not a directory: '{}'", path("files/data.txt")),
        ),
        ("file", "tpl/data.txt", format!("'imp-module-source:file://{}'", path("files/data.txt"))),
        ("file", "tpl/sub/../data.txt", format!("'imp-module-source:file://{}'", path("files/data.txt"))),
        ("file", "tpl/sub", format!("Exception: {} isn't a valid file", path("files/sub"))),
    ] {
        let got = run(name, vec![s(file)], vec![], &mut host);
        if got != expected {
            failures.push(format!("{name}({file}): got {got}, want {expected}"));
        }
    }
    assert!(failures.is_empty(), "{backing:?}:\n{}", failures.join("\n"));
    // Filters with the right arity work.
    let module2 = TempModule::new(&[(
        "templates/f.j2",
        "{{ 'a,b' | std.split(',') | length }} {{ 3 | std.sequence | std.len }} {{ x | std.at(0) }}",
    )]);
    host.modules = backing.modules(&[("tpl", &module), ("tpl2", &module2)]);
    host.vars.insert("x".into(), Ok(l(vec![s("first")])));
    assert_eq!(run("template", vec![s("tpl2/f.j2")], vec![], &mut host), "'2 3 first'");
}

/// Outcomes recorded from the reference's `validate_type` (see the file's header).
#[test]
fn validate_type_matches_recorded_outcomes() {
    let decode = |text: &str| -> Value {
        let (tag, body) = text.split_once(':').unwrap();
        match tag {
            "s" => {
                let mut out = String::new();
                let mut chars = body.chars();
                while let Some(c) = chars.next() {
                    if c == '\\' {
                        match chars.next() {
                            Some('t') => out.push('\t'),
                            Some('n') => out.push('\n'),
                            Some('r') => out.push('\r'),
                            Some(other) => out.push(other),
                            None => {}
                        }
                    } else {
                        out.push(c);
                    }
                }
                s(&out)
            }
            "i" => Value::int(body.parse().unwrap()),
            "f" => Value::Float(match body {
                "nan" => f64::NAN,
                "inf" => f64::INFINITY,
                "-inf" => f64::NEG_INFINITY,
                other => other.parse().unwrap(),
            }),
            "b" => Value::Bool(body == "True"),
            _ => NULL,
        }
    };
    let sig = std_sig("validate_type");
    let mut host = host();
    let mut failures = Vec::new();
    let mut count = 0;
    for line in include_str!("validate_type.tsv").lines().filter(|l| !l.starts_with('#')) {
        let [ty, value, params, expected] = line.split('\t').collect::<Vec<_>>()[..] else { panic!("bad line {line}") };
        let mut args = vec![s(ty), decode(value)];
        if !params.is_empty() {
            args.push(super::json::loads(params).unwrap());
        }
        let got = run_sig(&sig, args, vec![], &mut host);
        if got != expected {
            failures.push(format!("{ty} {value} {params}: got {got}, want {expected}"));
        }
        count += 1;
    }
    assert!(count > 2000);
    assert!(failures.is_empty(), "{} of {count} differ:\n{}", failures.len(), failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// Facts.

/// A host with resources: 4 a NullResource, 5 an instance of a subclass of it, 6 one whose
/// name has no value yet, 7 one whose agent is Unknown, 8 an `fs::File` on host 9.
fn host_with_resources() -> FakeHost {
    let mut host = host();
    let null =
        |entity: &'static str, agent: Result<Value, PluginError>, name: Result<Value, PluginError>| FakeInstance {
            entity,
            parents: vec!["std::testing::NullResource", "std::PurgeableResource", "std::Resource", "std::Entity"],
            attributes: vec![("agentname", agent), ("name", name)],
        };
    host.instances.push(null("std::testing::NullResource", Ok(s("agent1")), Ok(s("a"))));
    host.instances.push(null("__config__::MyNull", Ok(s("agent1")), Ok(s("b"))));
    host.instances.push(null("std::testing::NullResource", Ok(s("agent1")), Err(PluginError::Unset(9))));
    host.instances.push(null("std::testing::NullResource", Ok(U), Ok(s("c"))));
    host.instances.push(FakeInstance {
        entity: "fs::File",
        parents: vec!["std::PurgeableResource", "std::Resource", "std::Entity"],
        attributes: vec![("host", Ok(Value::Instance(9))), ("path", Ok(s("/etc/motd")))],
    });
    host.instances.push(FakeInstance {
        entity: "std::Host",
        parents: vec!["std::Entity"],
        attributes: vec![("name", Ok(s("web1")))],
    });
    host
}

const FACTS: &str = r#"{
    "std::testing::NullResource[agent1,name=a]": {
        "ip": "10.0.0.5",
        "big": 123456789012345678901234567890,
        "nested": [1, 2.5, {"k": null, "t": true}]
    },
    "std::testing::NullResource[agent1,name=b]": {"ip": "10.0.0.6"},
    "fs::File[web1,path=/etc/motd]": {"size": 12}
}"#;

#[test]
fn getfact_answers_from_the_facts() {
    // The fs module registers `fs::File` in its Python code, which an artifact carries as
    // registrations read when it was built.
    let fs = TempModule::new(&[(
        "plugins/__init__.py",
        "@resource(\"fs::File\", agent=\"host.name\", id_attribute=\"path\")\nclass File: pass\n",
    )]);
    let resource = |i: u32| Value::Instance(i);
    /// The resource argument, the fact's name, keyword arguments, the result.
    type FactCase = (Value, &'static str, Vec<(&'static str, Value)>, &'static str);
    let cases: Vec<FactCase> = vec![
        (resource(4), "ip", vec![], "'10.0.0.5'"),
        (resource(4), "big", vec![], "123456789012345678901234567890"),
        (resource(4), "nested", vec![], "[1, 2.5, {'k': null, 't': True}]"),
        (resource(4), "unknown_fact", vec![], "Unknown"),
        (resource(4), "unknown_fact", vec![("default_value", s("d"))], "'d'"),
        (resource(4), "ip", vec![("default_value", s("d"))], "'10.0.0.5'"),
        // A subclass has the id of the registered type it inherits.
        (resource(5), "ip", vec![], "'10.0.0.6'"),
        (resource(6), "ip", vec![], "Unset 9"),
        (resource(7), "ip", vec![("default_value", s("d"))], "Unknown"),
        (resource(8), "size", vec![], "12"),
        (resource(0), "ip", vec![], "Exception: Facts can only be retreived from resources."),
        (s("x"), "ip", vec![], "AttributeError: 'str' object has no attribute '_type'"),
        (i(1), "ip", vec![], "AttributeError: 'int' object has no attribute '_type'"),
        (NULL, "ip", vec![], "AttributeError: 'NoneType' object has no attribute '_type'"),
        (l(vec![resource(4)]), "ip", vec![], "AttributeError: 'list' object has no attribute 'type'"),
    ];
    let mut failures = Vec::new();
    for backing in [Backing::Directory, Backing::Embedded] {
        for (argument, fact, kwargs, expected) in &cases {
            let mut host = host_with_resources();
            host.modules = backing.modules(&[("fs", &fs)]);
            // No environment is configured: the facts stand in for the orchestrator.
            host.facts = Some(Facts::from_json(FACTS).unwrap());
            let got = run("getfact", vec![argument.clone(), s(fact)], kwargs.clone(), &mut host);
            if got != *expected {
                failures
                    .push(format!("{backing:?} getfact({argument:?}, {fact}, {kwargs:?}): got {got}, want {expected}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn getfact_without_facts_knows_none() {
    let mut host = host_with_resources();
    let configured = |host: &mut FakeHost| {
        host.env.insert("INMANTA_CONFIG_ENVIRONMENT".into(), "e6b1b6a8-0000-4000-8000-000000000000".into());
    };
    assert_eq!(
        run("getfact", vec![Value::Instance(4), s("ip")], vec![], &mut host),
        "Exception: The environment of this model should be configured in config>environment"
    );
    configured(&mut host);
    assert_eq!(run("getfact", vec![Value::Instance(4), s("ip")], vec![], &mut host), "Unknown");
    assert_eq!(run("getfact", vec![Value::Instance(4), s("ip")], vec![("default_value", i(3))], &mut host), "3");
    // The resource id comes first, facts or not (`to_id` of a string fails).
    assert_eq!(
        run("getfact", vec![s("x"), s("ip")], vec![], &mut host),
        "AttributeError: 'str' object has no attribute '_type'"
    );
}

#[test]
fn malformed_facts_are_rejected() {
    let cases: Vec<(&str, &str)> = vec![
        ("{\"a\": ", "line 1, column 6: EOF while parsing a value"),
        ("{\n  \"x\": {},\n  oops\n}", "line 3, column 3: key must be a string"),
        ("[]", "expected an object of resource ids, found an array"),
        ("{\"x\": {}}", "\"x\" is not a resource id without version (type[agent,attribute=value])"),
        (
            "{\"std::testing::NullResource[a,name=b],v=3\": {}}",
            "\"std::testing::NullResource[a,name=b],v=3\" is not a resource id without version \
             (type[agent,attribute=value])",
        ),
        (
            "{\"std::testing::NullResource[a,name=b]\": [1]}",
            "the facts of std::testing::NullResource[a,name=b] must be an object of fact names, found an array",
        ),
    ];
    let mut failures = Vec::new();
    for (text, expected) in cases {
        match Facts::from_json(text) {
            Ok(_) => failures.push(format!("{text:?}: accepted")),
            Err(e) if e.to_string() != expected => failures.push(format!("{text:?}: got {e}, want {expected}")),
            Err(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let facts = Facts::from_json("{}").unwrap();
    assert!(facts.is_empty());
    // A file's errors name it.
    let dir = TempModule::new(&[("facts.json", "{\"a\": 1,}")]);
    let path = dir.root.join("facts.json");
    let error = Facts::load(&path).unwrap_err();
    assert_eq!(error.to_string(), format!("{}: line 1, column 9: trailing comma", path.display()));
    let missing = Facts::load(&dir.root.join("nope.json")).unwrap_err();
    assert!(matches!(missing, FactsError::Read { .. }), "{missing}");
}

// ---------------------------------------------------------------------------------------
// What the differential corpus (`tests/fixtures/plugins`) cannot show, because it needs a host
// that knows more than the evaluator tells plugins today, or files the corpus must not write.

#[test]
fn passwords_live_in_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = host();
    host.data_dir = Some(dir.path().to_path_buf());
    let file = dir.path().join("std").join("passwordfile.txt");
    let missing = format!("Exception: Password web does not exist in file {}", file.display());
    assert_eq!(run("password", vec![s("web")], vec![], &mut host), missing);
    // A new password: 20 letters and digits, written to the file and read back after.
    let generated = run("generate_password", vec![s("web")], vec![], &mut host);
    let password = generated.trim_matches('\'').to_string();
    assert_eq!(password.len(), 20, "{generated}");
    assert!(password.chars().all(|c| c.is_ascii_alphanumeric()), "{generated}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), format!("web={password}\n"));
    assert_eq!(run("password", vec![s("web")], vec![], &mut host), generated);
    assert_eq!(run("generate_password", vec![s("web"), i(5)], vec![], &mut host), generated);
    // Others are appended; the length is the argument's, none for a negative one.
    let short = run("generate_password", vec![s("db"), i(5)], vec![], &mut host);
    assert_eq!(short.len(), 7, "{short}");
    assert_eq!(run("generate_password", vec![s("none"), i(-1)], vec![], &mut host), "''");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().map(|l| l.split('=').next().unwrap()).collect::<Vec<_>>(), ["web", "db", "none"]);
    // Two draws differ (62^20 possibilities).
    let other = run("generate_password", vec![s("other")], vec![], &mut host);
    assert_ne!(other, generated);
    // The file's lines as the reference reads them.
    std::fs::write(&file, "  a =  x y \nab\n=v\n=vv\nb=\n").unwrap();
    assert_eq!(run("password", vec![s("a")], vec![], &mut host), "'x y'");
    // `=v` is too short to count; `=vv` is the password of the empty id.
    assert_eq!(run("password", vec![s("")], vec![], &mut host), "'vv'");
    std::fs::write(&file, "no equals sign\n").unwrap();
    assert_eq!(run("password", vec![s("a")], vec![], &mut host), "ValueError: substring not found");
    assert_eq!(
        run("generate_password", vec![s("a=b")], vec![], &mut host),
        "Exception: The password id cannot contain ="
    );
}

/// The store is rewritten through a temporary file; what the operator set on it stays: a
/// symbolic link keeps pointing at the store it named, and the store keeps its mode.
#[test]
fn the_password_store_keeps_its_link_and_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mut host = host();
    host.data_dir = Some(dir.path().to_path_buf());
    let real = dir.path().join("secrets.txt");
    std::fs::write(&real, "db=hunter2\n").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir(dir.path().join("std")).unwrap();
    let link = dir.path().join("std").join("passwordfile.txt");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let generated = run("generate_password", vec![s("web")], vec![], &mut host);
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link was replaced");
    let text = std::fs::read_to_string(&real).unwrap();
    assert_eq!(text, format!("db=hunter2\nweb={}\n", generated.trim_matches('\'')));
    assert_eq!(std::fs::metadata(&real).unwrap().permissions().mode() & 0o777, 0o600);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 2, "{leftovers:?}");
}

#[test]
fn paths_starting_with_dot_are_in_the_calling_module() {
    let module = TempModule::new(&[("files/a.txt", "a"), ("templates/t.j2", "t={{ v }}")]);
    let mut host = host();
    host.modules = Backing::Directory.modules(&[("m", &module)]);
    let cases: Vec<(Option<&str>, &str, &str, &str)> = vec![
        (Some("m::sub"), "source", "./a.txt", "'a'"),
        (Some("m"), "template", "./t.j2", "'t=1'"),
        (
            Some("__config__"),
            "source",
            "./a.txt",
            "Exception: Unable to determine current module for path ./a.txt, called from __config__",
        ),
        (None, "source", "./a.txt", "Exception: Unable to determine current module for path ./a.txt"),
    ];
    for (caller, plugin, path, expected) in cases {
        host.caller = caller.map(str::to_string);
        let kwargs = if plugin == "template" { vec![("v", i(1))] } else { vec![] };
        assert_eq!(run(plugin, vec![s(path)], kwargs, &mut host), expected, "{plugin}({path}) from {caller:?}");
    }
}

#[test]
fn is_instance_of_a_type_the_model_lacks_fails() {
    let mut host = host();
    host.types = Some(vec!["__config__::Server", "std::Entity", "std::OS", "std::port"]);
    let server = Value::Instance(0);
    assert_eq!(run("is_instance", vec![server.clone(), s("std::Entity")], vec![], &mut host), "True");
    assert_eq!(run("is_instance", vec![server.clone(), s("std::port")], vec![], &mut host), "False");
    for missing in ["__config__::Nope", "Server", "string"] {
        assert_eq!(
            run("is_instance", vec![server.clone(), s(missing)], vec![], &mut host),
            "AttributeError: 'str' object has no attribute 'get_location'",
            "{missing}"
        );
    }
}

/// `mymod::double(n: "int") -> "int"` and `mymod::sub::echo(value) -> "any"`, a module
/// outside std.
struct MyMod;

fn double(call: &mut Call) -> NativeResult {
    Ok(Value::int(call.int_arg("n")? * 2))
}

fn echo(call: &mut Call) -> NativeResult {
    call.host().print("echo");
    Ok(call.arg("value").clone())
}

impl NativeModule for MyMod {
    fn name(&self) -> &'static str {
        "mymod"
    }

    fn plugins(&self) -> Vec<NativePlugin> {
        vec![
            NativePlugin::new("double", "n", double).returns("\"int\""),
            NativePlugin::new("sub::echo", "value", echo).py_name("echo_value").allow_unknown(),
        ]
    }

    fn reference_types(&self) -> Vec<ReferenceType> {
        vec![ReferenceType { name: "mymod::Ref", module: "inmanta_plugins.mymod", class: "Ref", resolves_to: "int" }]
    }
}

#[test]
fn a_module_outside_std_registers_its_plugins() {
    let mut registry = PluginRegistry::builtin().clone();
    registry.register(&MyMod).unwrap();
    assert_eq!(registry.plugin("mymod::double").map(|p| p.name), Some("double"));
    assert_eq!(registry.plugin("mymod::sub::echo").map(|p| p.py_name), Some("echo_value"));
    assert!(registry.plugin("std::print").is_some() && registry.plugin("mymod::print").is_none());
    assert_eq!(registry.reference_type("inmanta_plugins.mymod", "Ref").map(|r| r.name), Some("mymod::Ref"));
    // Twice is refused, and leaves the registry as it was.
    assert_eq!(registry.register(&MyMod), Err(RegistryError::DuplicatePlugin("mymod::double".into())));
    assert!(PluginRegistry::builtin().plugin("mymod::double").is_none());

    let mut host = host();
    host.registry = Some(registry);
    let double_sig = signature("mymod", "double", "n: \"int\"", Some("\"int\""), false);
    assert_eq!(run_sig(&double_sig, vec![i(21)], vec![], &mut host), "42");
    // The declared signature is what arguments are checked against.
    assert_eq!(
        run_sig(&double_sig, vec![s("x")], vec![], &mut host),
        "PluginTypeException: Value 'x' for argument n of plugin mymod::double has incompatible type. Expected \
         type: int"
    );
    let echo_sig = signature("mymod::sub", "echo", "value", None, true);
    assert_eq!(run_sig(&echo_sig, vec![U], vec![], &mut host), "Unknown");
    assert_eq!(host.prints, ["echo"]);
    // Its plugins are template filters too, named with dots.
    let module = TempModule::new(&[("templates/f.j2", "{{ 4 | mymod.double }} {{ 'x' | mymod.sub.echo }}")]);
    host.modules = Backing::Directory.modules(&[("tpl", &module)]);
    assert_eq!(run("template", vec![s("tpl/f.j2")], vec![], &mut host), "'8 x'");
    // Without the module, its plugins have no implementation.
    host.registry = None;
    assert_eq!(
        run_sig(&double_sig, vec![i(21)], vec![], &mut host),
        "NotImplementedError: plugin mymod::double has no native implementation in weft"
    );
}

#[test]
fn builtin_registry_has_no_duplicates() {
    let mut registry = PluginRegistry::new();
    for module in super::std_plugins::builtin_modules() {
        registry.register(module.as_ref()).unwrap();
    }
    assert_eq!(registry.plugins().count(), PluginRegistry::builtin().plugins().count());
    assert!(registry.plugin("exec::in_shell").is_some());
    assert_eq!(
        registry.reference_type("inmanta_plugins.std", "EnvironmentReference").map(|r| r.name),
        Some("std::Environment")
    );
}

/// A host that fails the test on any access: what a pure plugin must never need.
struct SealedHost(Modules);

impl PluginHost for SealedHost {
    fn print(&mut self, _: &str) {
        panic!("a pure plugin printed");
    }
    fn env_var(&self, _: &str) -> Option<String> {
        panic!("a pure plugin read the environment");
    }
    fn lookup(&mut self, _: &str) -> Result<Value, PluginError> {
        panic!("a pure plugin read a variable");
    }
    fn attribute(&mut self, _: u32, _: &str) -> Result<Value, PluginError> {
        panic!("a pure plugin read an attribute");
    }
    fn instance_type(&self, _: u32) -> String {
        panic!("a pure plugin read an instance");
    }
    fn is_instance_of(&self, _: u32, _: &str) -> bool {
        panic!("a pure plugin read an instance");
    }
    fn instance_display(&self, _: u32) -> String {
        panic!("a pure plugin read an instance");
    }
    fn modules(&self) -> &Modules {
        &self.0
    }
    fn facts(&self) -> Option<&Facts> {
        panic!("a pure plugin read the facts");
    }
    fn check_typedef(&mut self, _: &str, _: &Value) -> Result<bool, PluginError> {
        panic!("a pure plugin read the model's types");
    }
    fn caller_namespace(&self) -> Option<String> {
        panic!("a pure plugin read its caller");
    }
    fn type_exists(&self, _: &str) -> Option<bool> {
        panic!("a pure plugin read the model's types");
    }
    fn data_dir(&self) -> PathBuf {
        panic!("a pure plugin read the data directory");
    }
}

/// The std plugins marked pure (whose typedef constraints are memoized by value) give the
/// same result twice without touching the host, for valid and invalid values alike. A
/// plugin newly marked pure needs its cases here.
#[test]
fn pure_plugins_read_nothing_but_their_arguments() {
    let regex = Value::Dict(vec![(Arc::from("regex"), Value::str("^[a-z]*$"))].into());
    let cases: Vec<(&str, Vec<Value>)> = vec![
        ("validate_type", vec![Value::str("ipaddress.IPv4Address"), Value::str("10.0.0.1")]),
        ("validate_type", vec![Value::str("ipaddress.IPv4Address"), Value::str("10.0.0.300")]),
        ("validate_type", vec![Value::str("pydantic.constr"), Value::str("abc"), regex]),
        ("validate_type", vec![Value::str("pydantic.PositiveInt"), Value::Int(-1)]),
        ("validate_type", vec![Value::str("no.such.Type"), Value::str("x")]),
        ("is_base64_encoded", vec![Value::str("aGVsbG8=")]),
        ("is_base64_encoded", vec![Value::str("not base64!")]),
        ("length", vec![Value::str("héllo")]),
    ];
    let pure: std::collections::BTreeSet<&str> =
        super::std_plugins::all().iter().filter(|p| p.pure).map(|p| p.name).collect();
    let tested: std::collections::BTreeSet<&str> = cases.iter().map(|(name, _)| *name).collect();
    assert_eq!(pure, tested, "every plugin marked pure has cases here, and only those");
    let mut host = SealedHost(Modules::default());
    for (name, args) in cases {
        let sig = std_sig(name);
        let first = format!("{:?}", call(&sig, args.clone(), Vec::new(), &mut host));
        let second = format!("{:?}", call(&sig, args, Vec::new(), &mut host));
        assert_eq!(first, second, "std::{name}");
    }
}

/// A list or dict typed `object | Reference` passes without a walk of its elements, and the
/// walk it skips would have passed every value: plain values, nulls, unknowns, instances,
/// references, nested lists and dicts.
#[test]
fn lists_of_anything_pass_as_their_elements_would() {
    let mut host = host();
    let anything = super::types::Ty::from_python("Sequence[object | Reference]", "std");
    let element = super::types::Ty::from_python("object | Reference", "std");
    let values = vec![
        s("a"),
        i(1),
        Value::NULL,
        Value::Unknown,
        Value::Instance(0),
        env_ref("HOME"),
        l(vec![i(2), env_ref("X")]),
        d(vec![("k", env_ref("Y"))]),
    ];
    assert!(element.accepts_everything(), "{element:?}");
    assert!(matches!(&anything, super::types::Ty::TypedList(e) if e.accepts_everything()), "{anything:?}");
    for value in &values {
        assert_eq!(element.validate(value, &mut host).ok(), Some(super::types::Check::Ok), "{value:?}");
    }
    assert_eq!(anything.validate(&l(values.clone()), &mut host).ok(), Some(super::types::Check::Ok));
    let dict_of_anything = super::types::Ty::from_python("dict[str, object | Reference]", "std");
    let entries: Vec<(&str, Value)> = vec![("a", values[0].clone()), ("r", values[5].clone())];
    assert_eq!(dict_of_anything.validate(&d(entries), &mut host).ok(), Some(super::types::Check::Ok));
}

/// A pattern that needs more backtracking than weft allows is undecided, not a mismatch; one
/// that needs less, if much, decides as Python's `re` does.
#[test]
fn patterns_that_backtrack_too_long_are_undecided() {
    let pattern = r"^(?:(a|a)*\1b|a+c)$";
    let text = |n: usize| format!("{}c", "a".repeat(n));
    assert_eq!(super::validate::regex_match(pattern, &text(20), true), Some(Ok(true)));
    assert!(matches!(super::validate::regex_match(pattern, &text(40), true), Some(Err(_))));
    assert_eq!(super::validate::regex_match(pattern, "b", true), Some(Ok(false)));
}
