//! weft's runtime: the scheduler with the reference compiler's freeze rules, the end-of-compile
//! checks, and the plugins.
//!
//! [`evaluate`] runs a lowered [`Program`]: the VM ([`weft_vm::Machine`]) holds the cells and
//! tasks and knows what each instruction does; this crate decides *when* things happen. It
//! drains the run queue, and when nothing can run it picks the one relation to freeze exactly
//! as the reference's `Scheduler.run` does (spec §3.5), until nothing is left; then it runs the
//! final checks (§3.13).
//!
//! Architecture invariant: the runtime never depends on the frontend or on codegen, so a host
//! that only runs artifacts carries neither a parser nor a code generator.

pub mod apply;
pub mod artifact;
pub mod export;
pub mod graph;
mod json_text;
pub mod memory;
pub mod modules;
pub mod plugins;
mod python;
mod scheduler;

use std::sync::Arc;

use weft_ir::diagnostic::codes;
use weft_ir::program::{PluginId, Program};
use weft_ir::value::Value;
use weft_ir::{Diagnostic, ErrorKind};
use weft_vm::{EvalError, Executable, Host, Machine, PluginFailure, ScopeId};

pub use scheduler::MAX_ITERATIONS;

/// What an evaluation needs besides the program.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The loaded modules' files (`templates/`, `files/`) and resource registrations, from
    /// their directories or embedded in an artifact.
    pub modules: modules::Modules,
    /// The iteration limit (`INMANTA_MAX_ITERATIONS`); `None` for the default.
    pub max_iterations: Option<usize>,
    /// The resident memory past which the evaluation stops with an error (`--max-memory`);
    /// `None` for no limit.
    pub memory_limit: Option<memory::MemoryLimit>,
    /// The facts `std::getfact` answers with, standing in for the orchestrator; `None` keeps
    /// the behaviour without an orchestrator (every fact Unknown).
    pub facts: Option<plugins::Facts>,
    /// Where plugins keep data across compiles (std's passwords); `None` for `data` in the
    /// working directory, as the reference.
    pub data_dir: Option<std::path::PathBuf>,
    /// The Python interpreter that runs modules' own Python plugins (a Python environment's,
    /// so that they import what is installed there, as in the reference running in it);
    /// `None` for `python3` from `PATH`.
    pub python: Option<std::path::PathBuf>,
    /// The working directory of the Python plugins: the project's, where the reference is
    /// run, so that a plugin reading a relative path reads the same file wherever `weft` was
    /// started; `None` for weft's own (an artifact has no project).
    pub plugin_dir: Option<std::path::PathBuf>,
}

/// The result of an evaluation.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Lines written by `std::print`, in the order they were written.
    pub prints: Vec<String>,
    /// What modules' Python plugins wrote to their error stream (warnings, messages), in
    /// order: the reference shows them on its own.
    pub plugin_messages: Vec<String>,
    /// Empty when the compile succeeded; otherwise the errors, the reported one first.
    pub errors: Vec<Diagnostic>,
    /// Statistics, for benchmarks and `--verbose`.
    pub instances: usize,
    pub iterations: usize,
    pub tables: String,
}

/// Evaluates a program.
pub fn evaluate(program: Arc<Program>, options: &Options) -> Outcome {
    evaluate_model(program, options).0
}

/// Evaluates a program and, when it succeeds, keeps the evaluated model for the export.
pub fn evaluate_model(program: Arc<Program>, options: &Options) -> (Outcome, Option<export::Model>) {
    match Executable::from_program(program) {
        Ok(executable) => run(&executable, options),
        // The frontend's output always assembles; this is a bug, reported as an error of
        // the compile rather than a crash.
        Err(e) => {
            let error =
                Diagnostic::error(ErrorKind::RuntimeException, codes::EVAL_ERROR, format!("internal error: {e}"));
            (Outcome { errors: vec![error], ..Outcome::default() }, None)
        }
    }
}

/// Runs an executable (assembled from sources or loaded from an artifact) and, when it
/// succeeds, keeps the evaluated model for the export.
pub fn run(executable: &Executable, options: &Options) -> (Outcome, Option<export::Model>) {
    let program = executable.program.clone();
    let host = RuntimeHost {
        prints: Vec::new(),
        plugin_messages: Vec::new(),
        python: python::Servers::new(options.python.as_deref(), options.plugin_dir.as_deref()),
        python_packages: None,
        prepared: Vec::new(),
        modules: options.modules.clone(),
        facts: options.facts.clone(),
        data_dir: options.data_dir.clone(),
    };
    let mut machine = Machine::new(program.clone(), executable.code.clone(), Box::new(host));
    let result =
        scheduler::run(&mut machine, options.max_iterations.unwrap_or(MAX_ITERATIONS), options.memory_limit.as_ref());
    let mut outcome =
        Outcome { instances: machine.instances.len(), tables: machine.table_sizes(), ..Outcome::default() };
    let succeeded = result.is_ok();
    match result {
        Ok(iterations) => outcome.iterations = iterations,
        Err(errors) => outcome.errors = errors.into_iter().map(|e| to_diagnostic(&program, e)).collect(),
    }
    outcome.prints = take_prints(&mut machine);
    outcome.plugin_messages = machine.with_host(|host| host.take_messages());
    // The host stays with the model: the export may still run the modules' Python code (the
    // resource classes), in this evaluation's servers, as the reference exports in the
    // process that compiled. Without a model it is dropped here, which stops the servers.
    let host = machine.take_host().and_then(|host| (host as Box<dyn std::any::Any>).downcast::<RuntimeHost>().ok());
    let model = succeeded.then(|| export::Model::new(machine, host));
    (outcome, model)
}

fn take_prints(machine: &mut Machine) -> Vec<String> {
    machine.with_host(|host| host.take_prints())
}

/// Turns an evaluation error into a diagnostic: the outermost kind is the reported kind, the
/// causes become notes.
pub fn to_diagnostic(program: &Program, error: EvalError) -> Diagnostic {
    let code = match error.kind {
        ErrorKind::UnsetException => codes::EVAL_UNSET,
        _ => codes::EVAL_ERROR,
    };
    let mut d = Diagnostic::error(error.kind, code, error.message.clone());
    match (error.location, error.arose) {
        // The reference reports lines only: on the line it reports, the place the error arose
        // (the unknown name itself) is the more precise one to underline.
        (Some(location), Some(arose))
            if location.file == arose.file && program.line(location) == program.line(arose) =>
        {
            d = d.at(arose, "");
        }
        (Some(location), Some(arose)) => {
            d = d.at(location, "").with_label(arose, "not found in this scope".to_string())
        }
        (Some(location), None) => d = d.at(location, ""),
        (None, _) => {}
    }
    // Shown where the error has no place; an error located at a read still shows the
    // instance it is about.
    if let Some((location, text)) = &error.shown_at {
        d = match error.location {
            None => d.at(*location, text.clone()),
            Some(_) => d.with_label(*location, text.clone()),
        };
    }
    for (location, message) in &error.labels {
        d = d.with_label(*location, message.clone());
    }
    if error.kind == ErrorKind::MemoryLimitException {
        d = d
            .with_note(
                "a model that constructs instances without end (an implementation that constructs an instance \
                 of its own entity, say) grows until memory runs out"
                    .to_string(),
            )
            .with_note(
                "if the model really is this large, raise the limit with `--max-memory SIZE` (`none` for no limit)"
                    .to_string(),
            );
    }
    let mut cause = error.cause.as_deref();
    while let Some(c) = cause {
        let mut note = format!("caused by {}: {}", c.kind.as_str(), c.message);
        if let Some(l) = c.location {
            note.push_str(&format!(" ({})", program.location_text(l)));
        }
        d = d.with_note(note);
        cause = c.cause.as_deref();
    }
    d
}

/// The host the VM calls back into: plugins and their output.
pub(crate) struct RuntimeHost {
    prints: Vec<String>,
    plugin_messages: Vec<String>,
    /// The Python servers of this evaluation; before `modules`, whose sandboxes they import
    /// from, so that they stop first.
    python: python::Servers,
    /// Every module's plugin package (`Modules::python_packages`), from the first call of a
    /// Python plugin on.
    python_packages: Option<Vec<(String, std::path::PathBuf)>>,
    /// Per plugin of the program (`PluginId`), once called.
    prepared: Vec<Option<Arc<plugins::Prepared>>>,
    modules: modules::Modules,
    facts: Option<plugins::Facts>,
    data_dir: Option<std::path::PathBuf>,
}

impl Host for RuntimeHost {
    fn reference_resolves_to(&self, reference: &weft_ir::value::Reference) -> Option<weft_ir::program::Primitive> {
        let registered = plugins::PluginRegistry::builtin().reference_type(&reference.module, &reference.class)?;
        weft_ir::program::Primitive::from_name(registered.resolves_to)
    }

    fn call_plugin(
        &mut self,
        machine: &mut Machine,
        scope: ScopeId,
        plugin: PluginId,
        args: Vec<Value>,
        kwargs: Vec<(String, Value)>,
    ) -> Result<Value, PluginFailure> {
        let program = machine.program().clone();
        let signature = &program.plugins[plugin.index()];
        let prepared = self.prepared(signature, plugin);
        let name = prepared.qualified_name();
        if signature.namespace != "std" && !prepared.is_native() {
            // The reference checks the arguments of a module's plugin against their
            // annotations before it calls the Python function.
            let mut adapter = self.adapter(&mut *machine, scope);
            plugins::check_arguments(signature, &prepared, &args, &kwargs, &mut adapter)
                .map_err(|e| plugin_failure(name, e))?;
            let returned = match self.call_python(machine, scope, signature, args, kwargs) {
                Err(PythonFailure::Unencodable(text)) => {
                    let mut adapter = self.adapter(&mut *machine, scope);
                    return Err(plugin_failure(name, plugins::unencodable_return(&prepared, &text, &mut adapter)));
                }
                Err(PythonFailure::Failure(failure)) => return Err(failure),
                Ok(returned) => returned,
            };
            if !instances_exist(&returned.value, machine.instances.len()) {
                return Err(PluginFailure::Error(EvalError::new(
                    ErrorKind::ExternalException,
                    format!("Exception in plugin {name}: it returned an instance that is not in this evaluation"),
                )));
            }
            // The reference checks the returned value against the return annotation.
            let mut adapter = self.adapter(&mut *machine, scope);
            plugins::check_python_return(&prepared, &returned.value, returned.is_tuple, &mut adapter)
                .map_err(|e| plugin_failure(name, e))?;
            return Ok(returned.value);
        }
        let mut adapter = self.adapter(machine, scope);
        plugins::call_prepared(signature, &prepared, args, kwargs, &mut adapter).map_err(|e| plugin_failure(name, e))
    }

    fn plugin_is_pure(&mut self, program: &weft_ir::program::Program, plugin: PluginId) -> bool {
        let signature = &program.plugins[plugin.index()];
        self.prepared(signature, plugin).is_pure()
    }

    fn take_prints(&mut self) -> Vec<String> {
        std::mem::take(&mut self.prints)
    }

    fn take_messages(&mut self) -> Vec<String> {
        std::mem::take(&mut self.plugin_messages)
    }
}

/// A plugin's error as the evaluator reports it, with the reference's wrapping.
fn plugin_failure(name: &str, e: plugins::PluginError) -> PluginFailure {
    match e {
        plugins::PluginError::Unset(cell) => PluginFailure::Unset(cell),
        plugins::PluginError::External { class, message } => PluginFailure::Error(EvalError::wrap(
            ErrorKind::ExternalException,
            format!("Exception in plugin {name}"),
            EvalError::new(ErrorKind::ExternalException, format!("{class}: {message}")),
        )),
        plugins::PluginError::Explicit(message) => PluginFailure::Error(EvalError::new(
            ErrorKind::ExplicitPluginException,
            format!("PluginException in plugin {name}: {message}"),
        )),
        plugins::PluginError::Wrapped { kind, message } => PluginFailure::Error(EvalError::wrap(
            ErrorKind::WrappingRuntimeException,
            format!("Exception in plugin {name}"),
            EvalError::new(kind, message),
        )),
        // The reference reports a reference where the annotation allows none as a
        // plugin type error too.
        plugins::PluginError::Type { message, cause } | plugins::PluginError::Reference { message, cause } => {
            PluginFailure::Error(match cause {
                Some(cause) => {
                    EvalError::wrap(ErrorKind::PluginTypeException, message, EvalError::new(cause.kind, cause.message))
                }
                None => EvalError::new(ErrorKind::PluginTypeException, message),
            })
        }
        plugins::PluginError::Runtime(message) => {
            PluginFailure::Error(EvalError::new(ErrorKind::RuntimeException, message))
        }
    }
}

impl RuntimeHost {
    /// Where plugins keep data across compiles (see [`plugins::PluginHost::data_dir`]).
    fn data_dir(&self) -> std::path::PathBuf {
        data_dir_or_default(&self.data_dir)
    }

    /// What a plugin called from `scope` sees of the evaluation.
    fn adapter<'m>(&'m mut self, machine: &'m mut Machine, scope: ScopeId) -> Adapter<'m> {
        Adapter {
            machine,
            scope,
            prints: &mut self.prints,
            modules: &self.modules,
            facts: self.facts.as_ref(),
            data_dir: &self.data_dir,
        }
    }

    /// The plugin's [`plugins::Prepared`], made at its first call. The adapter's registry,
    /// which the calls use, is the builtin one.
    fn prepared(&mut self, signature: &weft_ir::plugin::PluginSignature, plugin: PluginId) -> Arc<plugins::Prepared> {
        if self.prepared.len() <= plugin.index() {
            self.prepared.resize(plugin.index() + 1, None);
        }
        self.prepared[plugin.index()]
            .get_or_insert_with(|| Arc::new(plugins::Prepared::new(signature, plugins::PluginRegistry::builtin())))
            .clone()
    }

    /// A module's own plugin, through the Python bridge.
    fn call_python(
        &mut self,
        machine: &mut Machine,
        scope: ScopeId,
        signature: &weft_ir::plugin::PluginSignature,
        args: Vec<Value>,
        kwargs: Vec<(String, Value)>,
    ) -> Result<python::Returned, PythonFailure> {
        let name = signature.qualified_name();
        let top = signature.namespace.split("::").next().unwrap_or_default();
        let package = match self.modules.python_dir(top) {
            Ok(dir) => dir,
            Err(reason) => {
                return Err(PluginFailure::Error(EvalError::new(
                    ErrorKind::ExternalException,
                    format!("Exception in plugin {name}: {reason}"),
                ))
                .into());
            }
        };
        let module = format!("inmanta_plugins.{}", signature.namespace.replace("::", "."));
        let args = args.into_iter().map(|v| bridge_value(machine, v)).collect::<Result<Vec<_>, _>>()?;
        let kwargs = kwargs
            .into_iter()
            .map(|(k, v)| Ok((k, bridge_value(machine, v)?)))
            .collect::<Result<Vec<_>, PluginFailure>>()?;
        let context = signature.takes_context.then(|| python::PluginContext {
            position: signature.context_position as usize,
            // Absolute: the plugin's working directory may be another one.
            data_dir: {
                let dir = self.data_dir();
                std::path::absolute(&dir).unwrap_or(dir).join(&signature.namespace)
            },
            namespace: caller_namespace(machine, scope),
        });
        let called = self.with_bridge(machine, scope, Some((top, package)), |bridge, requests| {
            let call = python::PluginCall {
                packages: bridge.packages,
                module: &module,
                function: &signature.name,
                args,
                kwargs,
                context,
            };
            python::call(bridge.sandboxes, bridge.servers, call, bridge.output, requests)
        });
        let outcome = match called {
            Err(python::BridgeError::Unencodable(text)) => return Err(PythonFailure::Unencodable(text)),
            Ok(v) => Ok(v),
            Err(python::BridgeError::Python(class, message)) => Err(PluginFailure::Error(EvalError::wrap(
                ErrorKind::ExternalException,
                format!("Exception in plugin {name}"),
                EvalError::new(ErrorKind::ExternalException, format!("{class}: {message}")),
            ))),
            // The reference chains the Python exception under its own, as for other exceptions.
            Err(python::BridgeError::Plugin(class, message)) => Err(PluginFailure::Error(EvalError::wrap(
                ErrorKind::ExplicitPluginException,
                format!("PluginException in plugin {name}"),
                EvalError::new(ErrorKind::ExternalException, format!("{class}: {message}")),
            ))),
            Err(python::BridgeError::Unset(cell)) => Err(PluginFailure::Unset(cell)),
            Err(python::BridgeError::Compiler(kind, message)) => Err(PluginFailure::Error(EvalError::wrap(
                ErrorKind::WrappingRuntimeException,
                format!("Exception in plugin {name}"),
                EvalError::new(ErrorKind::from_name(&kind).unwrap_or(ErrorKind::RuntimeException), message),
            ))),
            Err(python::BridgeError::Runtime(message)) => Err(PluginFailure::Error(EvalError::wrap(
                ErrorKind::WrappingRuntimeException,
                format!("Exception in plugin {name}"),
                EvalError::new(ErrorKind::RuntimeException, message),
            ))),
            Err(python::BridgeError::Unavailable(message)) => Err(PluginFailure::Error(EvalError::new(
                ErrorKind::ExternalException,
                format!("Exception in plugin {name}: {message}"),
            ))),
        };
        outcome.map_err(PythonFailure::Failure)
    }
}

impl RuntimeHost {
    /// Runs `exchange` with the Python bridge, answering what the Python code asks of the
    /// evaluation (attributes of instance proxies, module files, entity types, std's
    /// functions) from `machine`, as for a call from `scope` (`u32::MAX` for none). `extra` is
    /// a package to add to every module's (see [`modules::Modules::python_packages`]): the
    /// called plugin's, when Python imports it without an `__init__.py`.
    fn with_bridge<T>(
        &mut self,
        machine: &mut Machine,
        scope: ScopeId,
        extra: Option<(&str, std::path::PathBuf)>,
        exchange: impl FnOnce(python::Bridge<'_>, &mut dyn FnMut(python::Request<'_>) -> python::Reply) -> T,
    ) -> T {
        let namespace = caller_namespace(machine, scope);
        let (bridge, modules, facts, data_dir) = self.bridge(extra);
        exchange(bridge, &mut |request| match request {
            python::Request::Attribute { instance, name } => {
                python::Reply::Attribute(attribute_reply(machine, instance, name))
            }
            python::Request::ModuleFile { module_dir, path } => python::Reply::ModuleFile(
                plugins::module_file_content(modules, namespace.as_deref(), module_dir, path).map_err(refusal),
            ),
            python::Request::EntityOf { instance } => python::Reply::Entity(
                machine
                    .instances
                    .get(instance as usize)
                    .map(|i| serde_json::Value::String(machine.program().entity(i.entity).name.clone()))
                    .ok_or_else(|| format!("no instance {instance} in this evaluation")),
            ),
            python::Request::Entity { name } => python::Reply::Entity(entity_named(machine.program(), name)),
            python::Request::StdCall { function, args, kwargs } => {
                // What the function prints is dropped: std's functions that Python can
                // call print nothing.
                let mut prints = Vec::new();
                let mut adapter = Adapter { machine, scope, prints: &mut prints, modules, facts, data_dir };
                python::Reply::StdCall(std_call(&mut adapter, function, args, kwargs))
            }
        })
    }

    /// The Python bridge's parts (see [`python::Bridge`]), and the parts of the host that answer its
    /// questions.
    #[allow(clippy::type_complexity)]
    pub(crate) fn bridge(
        &mut self,
        extra: Option<(&str, std::path::PathBuf)>,
    ) -> (python::Bridge<'_>, &modules::Modules, Option<&plugins::Facts>, &Option<std::path::PathBuf>) {
        let modules = &self.modules;
        let packages = self.python_packages.get_or_insert_with(|| modules.python_packages());
        if let Some((top, package)) = extra
            && !packages.iter().any(|(module, _)| module == top)
        {
            // A package without `__init__.py` that Python still imports (a namespace package).
            packages.push((top.to_string(), package));
        }
        let bridge = python::Bridge {
            sandboxes: modules.sandboxes(),
            servers: &mut self.python,
            packages,
            output: python::Output { prints: &mut self.prints, errors: &mut self.plugin_messages },
        };
        (bridge, modules, self.facts.as_ref(), &self.data_dir)
    }

    /// Takes the lines the Python code printed and wrote to its error stream since the last
    /// time.
    pub(crate) fn take_output(&mut self) -> (Vec<String>, Vec<String>) {
        (std::mem::take(&mut self.prints), std::mem::take(&mut self.plugin_messages))
    }
}

/// How a call through the Python bridge failed: as a plugin call does, or with a returned
/// value the model has no value for, whose error needs the plugin's return annotation.
enum PythonFailure {
    Failure(PluginFailure),
    Unencodable(String),
}

impl From<PluginFailure> for PythonFailure {
    fn from(failure: PluginFailure) -> PythonFailure {
        PythonFailure::Failure(failure)
    }
}

/// The answer to a Python plugin asking for an entity type by its full name
/// (`python::Request::Entity`): its description, or why there is none.
pub(crate) fn entity_named(program: &weft_ir::program::Program, name: &str) -> Result<serde_json::Value, String> {
    program
        .entity_by_name(name)
        .map(|entity| entity_description(program, entity))
        .ok_or_else(|| format!("could not find type {name}"))
}

/// What a Python plugin reads of an entity type (the driver's `inmanta.ast.entity.Entity`):
/// its full name, its direct parents, its own attributes in definition order with their arity
/// and, for a relation end, its target and other end, and its indices (its own and those it
/// inherits, as attribute lists). The driver walks the parents as the reference does.
fn entity_description(program: &weft_ir::program::Program, id: weft_ir::program::EntityId) -> serde_json::Value {
    use weft_ir::program::AttributeKind;
    let entity = program.entity(id);
    let attributes: Vec<serde_json::Value> = entity
        .attributes
        .iter()
        .map(|&attr| {
            let attribute = program.attribute(attr);
            let (name, owner) = (program.name(attribute.name), &entity.name);
            match attribute.kind {
                AttributeKind::Value(ty) => serde_json::json!({
                    "name": name, "owner": owner, "relation": false, "optional": ty.nullable, "multi": ty.list,
                }),
                AttributeKind::Relation(end) => serde_json::json!({
                    "name": name, "owner": owner, "relation": true,
                    "optional": end.lower == 0, "multi": end.is_multi(),
                    "low": end.lower, "high": end.upper,
                    "target": program.entity(end.target).name,
                    "end": end.inverse.map(|inverse| {
                        let inverse = program.attribute(inverse);
                        [program.entity(inverse.entity).name.clone(), program.name(inverse.name).to_string()]
                    }),
                }),
            }
        })
        .collect();
    let indices: Vec<Vec<&str>> =
        entity.indexes.iter().map(|index| index.iter().map(|&name| program.name(name)).collect()).collect();
    serde_json::json!({
        "name": entity.name,
        "parents": entity.parents.iter().map(|&p| program.entity(p).name.as_str()).collect::<Vec<_>>(),
        "attributes": attributes,
        "indices": indices,
    })
}

/// A Python plugin's call of a function of std's package that weft implements natively
/// (`inmanta_plugins.std.getfact`): run as std's plugin of that name, whose code the
/// reference's function shares.
fn std_call(
    adapter: &mut Adapter<'_>,
    function: &str,
    args: Vec<Value>,
    kwargs: Vec<(String, Value)>,
) -> Result<Value, python::Refusal> {
    let program = adapter.machine.program().clone();
    let Some(signature) = program.plugins.iter().find(|p| p.namespace == "std" && p.name == function) else {
        return Err(python::Refusal::Exception {
            class: "NotImplementedError".to_string(),
            message: format!("inmanta_plugins.std.{function} is not available in weft's Python bridge"),
        });
    };
    let prepared = plugins::Prepared::new(signature, plugins::PluginRegistry::builtin());
    plugins::call_prepared(signature, &prepared, args, kwargs, adapter).map_err(refusal)
}

/// What a Python plugin raises for a plugin error of the evaluator's answering it.
fn refusal(e: plugins::PluginError) -> python::Refusal {
    match e {
        plugins::PluginError::Unset(cell) => python::Refusal::Unset(cell),
        plugins::PluginError::External { class, message } => python::Refusal::Exception { class, message },
        plugins::PluginError::Wrapped { kind, message } => {
            python::Refusal::Compiler { kind: kind.as_str().to_string(), message }
        }
        e => python::Refusal::Compiler { kind: e.kind().as_str().to_string(), message: e.message() },
    }
}

/// Converts a value for the Python bridge: instances of `std::Dataclass` entities become
/// their Python dataclass, other instances a proxy that reads their attributes on demand, and
/// lists and dicts that hold instances are converted element by element.
/// The full name of the namespace whose code made a plugin call from `scope` (`module::sub`,
/// `__config__` for `main.cf`); `None` for a call without a scope (`u32::MAX`: a typedef's
/// constraint) or from an instance's scope.
fn caller_namespace(machine: &Machine, scope: ScopeId) -> Option<String> {
    if scope == u32::MAX {
        return None;
    }
    let ns = machine.scope_namespace(scope)?;
    Some(machine.program().namespaces[ns.index()].name.clone())
}

fn bridge_value(machine: &mut Machine, v: Value) -> Result<python::BridgeValue, PluginFailure> {
    match v {
        Value::Instance(inst) => bridge_instance(machine, inst),
        Value::List(items) if items.iter().any(holds_instances) => Ok(python::BridgeValue::List(
            items.iter().map(|item| bridge_value(machine, item.clone())).collect::<Result<_, _>>()?,
        )),
        Value::Dict(entries) if entries.iter().any(|(_, v)| holds_instances(v)) => Ok(python::BridgeValue::Dict(
            entries
                .iter()
                .map(|(k, v)| Ok((k.to_string(), bridge_value(machine, v.clone())?)))
                .collect::<Result<_, PluginFailure>>()?,
        )),
        other => Ok(python::BridgeValue::Plain(other)),
    }
}

pub(crate) fn holds_instances(v: &Value) -> bool {
    v.any_nested(&|v| matches!(v, Value::Instance(_)))
}

fn bridge_instance(machine: &mut Machine, inst: u32) -> Result<python::BridgeValue, PluginFailure> {
    let program = machine.program().clone();
    let entity = machine.instances[inst as usize].entity;
    let is_dataclass = program.entity_by_name("std::Dataclass").is_some_and(|d| program.is_subclass(entity, d));
    if !is_dataclass {
        return Ok(python::BridgeValue::Instance {
            id: inst,
            display: machine.instance_display(inst),
            known: Vec::new(),
        });
    }
    let full = &program.entity(entity).name;
    let (ns, class) = full.rsplit_once("::").unwrap_or(("", full));
    let mut fields = Vec::new();
    for (name, _) in program.entity(entity).slots.clone() {
        let text = program.name(name).to_string();
        if text == "requires" || text == "provides" {
            continue;
        }
        let value = machine.attribute_value(inst, &text).map_err(|e| match e.unset {
            Some(cell) => PluginFailure::Unset(cell),
            None => PluginFailure::Error(e),
        })?;
        fields.push((text, bridge_value(machine, value)?));
    }
    Ok(python::BridgeValue::Dataclass {
        module: format!("inmanta_plugins.{}", ns.replace("::", ".")),
        class: class.to_string(),
        fields,
    })
}

/// The evaluator's answer to a Python plugin reading `name` of the instance `inst`.
fn attribute_reply(machine: &mut Machine, inst: u32, name: &str) -> python::AttributeReply {
    if inst as usize >= machine.instances.len() {
        return python::AttributeReply::Error {
            kind: "RuntimeException".to_string(),
            message: format!("no instance {inst} in this evaluation"),
        };
    }
    match machine.attribute_value(inst, name) {
        Ok(Value::Unknown) => python::AttributeReply::Unknown,
        Ok(value) => match bridge_value(machine, value) {
            Ok(value) => python::AttributeReply::Value(value),
            Err(PluginFailure::Unset(cell)) => python::AttributeReply::Unset(cell),
            Err(PluginFailure::Error(e)) => {
                python::AttributeReply::Error { kind: e.kind.as_str().to_string(), message: e.message.clone() }
            }
        },
        Err(e) => match e.unset {
            Some(cell) => python::AttributeReply::Unset(cell),
            None if e.kind == ErrorKind::NotFoundException => python::AttributeReply::NotFound(e.message.clone()),
            None => python::AttributeReply::Error { kind: e.kind.as_str().to_string(), message: e.message.clone() },
        },
    }
}

/// Whether every instance a value names is one of the evaluation's: a plugin returns what it
/// was given, but its ids come back through Python.
fn instances_exist(v: &Value, count: usize) -> bool {
    !v.any_nested(&|v| matches!(v, Value::Instance(id) if *id as usize >= count))
}

/// The directory `Context.get_data_dir` is under: the configured one, or `data` in the
/// working directory.
fn data_dir_or_default(configured: &Option<std::path::PathBuf>) -> std::path::PathBuf {
    configured.clone().unwrap_or_else(|| std::path::PathBuf::from("data"))
}

/// What a plugin sees of the evaluation: the machine, and the parts of the host it reads, so
/// that one can be made while other parts are in use (a Python plugin's call of std).
struct Adapter<'m> {
    machine: &'m mut Machine,
    scope: ScopeId,
    /// Where the plugin's `std::print` lines go.
    prints: &'m mut Vec<String>,
    modules: &'m modules::Modules,
    facts: Option<&'m plugins::Facts>,
    data_dir: &'m Option<std::path::PathBuf>,
}

impl plugins::PluginHost for Adapter<'_> {
    fn print(&mut self, text: &str) {
        for line in text.split('\n') {
            self.prints.push(line.to_string());
        }
    }

    fn env_var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn lookup(&mut self, name: &str) -> Result<Value, plugins::PluginError> {
        if self.scope == u32::MAX {
            return Err(plugins::PluginError::Wrapped {
                kind: ErrorKind::NotFoundException,
                message: format!("variable {name} not found"),
            });
        }
        self.machine.lookup_value(self.scope, name).map_err(plugin_error)
    }

    fn attribute(&mut self, instance: u32, name: &str) -> Result<Value, plugins::PluginError> {
        self.machine.attribute_value(instance, name).map_err(plugin_error)
    }

    fn instance_type(&self, instance: u32) -> String {
        let entity = self.machine.instances[instance as usize].entity;
        self.machine.program().entity(entity).name.clone()
    }

    fn is_instance_of(&self, instance: u32, entity: &str) -> bool {
        let program = self.machine.program();
        let own = self.machine.instances[instance as usize].entity;
        program.entity_by_name(entity).is_some_and(|e| program.is_subclass(own, e))
    }

    fn instance_display(&self, instance: u32) -> String {
        self.machine.instance_display(instance)
    }

    fn modules(&self) -> &modules::Modules {
        self.modules
    }

    fn facts(&self) -> Option<&plugins::Facts> {
        self.facts
    }

    fn caller_namespace(&self) -> Option<String> {
        caller_namespace(self.machine, self.scope)
    }

    fn check_typedef(&mut self, name: &str, value: &Value) -> Result<bool, plugins::PluginError> {
        Ok(self.machine.typedef_accepts(name, value).unwrap_or(false))
    }

    fn typedef_refusal(&mut self, name: &str, value: &Value) -> Option<Option<plugins::Cause>> {
        let typedef = self.machine.program().typedef_by_name(name)?;
        let refusal = self.machine.typedef_refusal(typedef, value);
        Some(refusal.map(|(kind, message)| plugins::Cause { kind, message }))
    }

    fn type_exists(&self, name: &str) -> Option<bool> {
        let program = self.machine.program();
        Some(program.entity_by_name(name).is_some() || program.typedef_by_name(name).is_some())
    }

    fn data_dir(&self) -> std::path::PathBuf {
        data_dir_or_default(self.data_dir)
    }
}

fn plugin_error(e: EvalError) -> plugins::PluginError {
    let e = e.into_data();
    match e.unset {
        Some(cell) => plugins::PluginError::Unset(cell),
        None => plugins::PluginError::Wrapped { kind: e.kind, message: e.message },
    }
}
