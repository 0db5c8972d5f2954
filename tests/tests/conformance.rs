//! The conformance corpus, evaluated: every case in `tests/conformance/` compiles to the
//! outcome the reference recorded in its `expect.json`.
//!
//! Compared, as the corpus README prescribes: the status; for a success the sorted
//! `std::print` lines; for an error its kind and, when the reference gave one, its line. Kinds
//! that are raw Python exceptions escaping the reference (`ZeroDivisionError`,
//! `ModuleNotFoundError`) only need an error. When weft reports a cause for an error (the
//! compiler error a plugin wrapped, the Python exception it raised), it must be the first of the
//! causes the reference recorded. A case may be listed, with its reason, in
//! `tests/conformance/known-divergences.tsv`; a listed case that starts to pass fails the suite
//! so the list stays true.
//!
//! Some corpus cases are the small instances of a model generator here (`diamond_model`,
//! `chain_model`, ...): deep hierarchies, long chains, large literals. The same generators make
//! instances far larger, which must evaluate to the same outcome within a deadline
//! (`check_deepened`), so that no work grows faster than the model.

use std::path::Path;

use serde::Deserialize;
use weft_tests::compile::{Outcome, build_and_run, compile};
use weft_tests::{cases_in, corpus};

#[derive(Deserialize)]
struct Expect {
    status: String,
    prints: Vec<String>,
    error: Option<ExpectError>,
}

#[derive(Deserialize)]
struct ExpectError {
    kind: String,
    line: Option<u32>,
    #[serde(default)]
    causes: Vec<String>,
    /// The first line of the reference's message.
    #[serde(default)]
    message: Option<String>,
}

/// Why `actual` does not conform to `expect`, if it does not.
fn mismatch(expect: &Expect, actual: &Outcome) -> Option<String> {
    let expected_ok = expect.status == "ok";
    if expected_ok != actual.ok {
        return Some(format!(
            "status: expected {}, got {}",
            expect.status,
            match &actual.error {
                None => "ok".to_string(),
                Some((kind, line, _)) => format!("error {} at line {line:?}", kind.as_str()),
            }
        ));
    }
    if expected_ok {
        let mut expected = expect.prints.clone();
        expected.sort();
        if expected != actual.prints {
            return Some(format!("prints: expected {expected:?}, got {:?}", actual.prints));
        }
        return None;
    }
    let want = expect.error.as_ref().expect("an error case has an error");
    let (kind, line, _) = actual.error.as_ref().expect("checked above");
    if matches!(want.kind.as_str(), "ZeroDivisionError" | "ModuleNotFoundError") {
        return None;
    }
    if kind.as_str() != want.kind {
        return Some(format!("kind: expected {}, got {} (line {line:?})", want.kind, kind.as_str()));
    }
    if want.line.is_some() && want.line != *line {
        return Some(format!("line: expected {:?}, got {line:?} ({})", want.line, kind.as_str()));
    }
    // weft does not report every cause the reference chains (the `FileNotFoundError` behind a
    // module that can not be loaded), but one it reports must be the reference's.
    if let Some(cause) = &actual.cause
        && want.causes.first() != Some(cause)
    {
        return Some(format!("cause: expected {:?}, got {cause} ({})", want.causes, kind.as_str()));
    }
    None
}

fn known_divergences(root: &Path) -> Vec<(String, String)> {
    listed(root, "known-divergences.tsv")
}

/// The rows of a table of cases next to a corpus: case name to its reason.
fn listed(root: &Path, table: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root.join(table)).unwrap_or_default();
    weft_tests::table_rows(&text).into_iter().map(|(case, columns)| (case, columns.join("\t"))).collect()
}

/// Error messages read as the reference's: for every error case of the corpus, the first line
/// of weft's message is the first line the reference printed, except for the cases listed in
/// `tests/conformance/message-differences.tsv`, each with the reason weft says it otherwise
/// (a syntax error that names what was expected, say). A listed case whose message starts to
/// match fails the test, so the list stays true.
#[test]
fn corpus_errors_read_as_the_reference_words_them() {
    let root = corpus();
    let differences = listed(&root, "message-differences.tsv");
    // A case whose outcome is a known divergence has no message of the reference's to match.
    let divergent = known_divergences(&root);
    let mut unlisted = Vec::new();
    let mut matching = Vec::new();
    for case in cases_in(&root) {
        let name = case.strip_prefix(&root).expect("inside").to_string_lossy().replace('\\', "/");
        if divergent.iter().any(|(c, _)| *c == name) {
            continue;
        }
        let expect: Expect =
            serde_json::from_str(&std::fs::read_to_string(case.join("expect.json")).expect("readable"))
                .expect("valid expect.json");
        let Some(want) = expect.error.and_then(|e| e.message) else { continue };
        let got = compile(&case).message.unwrap_or_default();
        let listed = differences.iter().any(|(c, _)| *c == name);
        match (got.trim() == want.trim(), listed) {
            (false, false) => unlisted.push(format!("{name}:\n  reference: {want}\n  weft:      {got}")),
            (true, true) => matching.push(name),
            _ => {}
        }
    }
    assert!(
        unlisted.is_empty() && matching.is_empty(),
        "messages that differ from the reference's:\n{}\nlisted as different but matching now: {matching:?}",
        unlisted.join("\n")
    );
}

#[test]
fn corpus_evaluates_as_the_reference_evaluates() {
    check_cases(&corpus(), &known_divergences(&corpus()));
}

/// Issue 6: every plugin of std 8.7.5 on a table of inputs (values, edge cases, Unknowns,
/// and one case per error, since a compile stops at the first), recorded from the reference
/// with `oracle.py` (`fixtures/plugins/<plugin>/<case>`; `table` prints the results).
#[test]
fn std_plugins_evaluate_as_the_reference_evaluates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join("plugins");
    check_cases(&root, &known_divergences(&root));
}

/// The demonstrations D1-D12 of the semantics spec (`inmanta-semantics.md` §3.15), completed
/// into models and recorded from the reference with `oracle.py`.
#[test]
fn spec_demonstrations_evaluate_as_the_reference_evaluates() {
    check_cases(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join("eval"), &[]);
}

fn check_cases(root: &Path, known: &[(String, String)]) {
    let root = root.to_path_buf();
    let mut failures = Vec::new();
    let mut fixed = Vec::new();
    let all = cases_in(&root);
    for case in &all {
        let name = case.strip_prefix(&root).expect("inside").to_string_lossy().replace('\\', "/");
        let expect: Expect =
            serde_json::from_str(&std::fs::read_to_string(case.join("expect.json")).expect("readable"))
                .expect("valid expect.json");
        let actual = compile(case);
        let problem = mismatch(&expect, &actual);
        let listed = known.iter().any(|(c, _)| *c == name);
        match (problem, listed) {
            (Some(p), false) => failures.push(format!("{name}: {p}")),
            (None, true) => fixed.push(name),
            _ => {}
        }
    }
    assert!(
        failures.is_empty() && fixed.is_empty(),
        "{} of {} cases do not conform:\n{}\nlisted as divergent but conforming now: {fixed:?}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

/// Issue 5's round trip: for every case, building an artifact and running it (from memory,
/// without the sources) gives exactly what compiling the sources gives: the same prints, the
/// same error kind, file and line.
#[test]
fn every_case_runs_the_same_from_an_artifact() {
    let mut differences = Vec::new();
    let mut count = 0;
    for root in [corpus(), Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join("eval")] {
        for case in cases_in(&root) {
            count += 1;
            let mut direct = compile(&case);
            // A message about a module's file names an embedded file by its path under
            // `/weft/modules` (a documented divergence of artifacts, see `runtime::modules`).
            let libs = format!("{}/libs/", case.display());
            direct.cause_message = direct.cause_message.map(|m| m.replace(&libs, "/weft/modules/"));
            let artifact = build_and_run(&case);
            if direct != artifact {
                differences.push(format!("{}:\n  compile: {direct:?}\n  run:     {artifact:?}", case.display()));
            }
        }
    }
    assert!(differences.is_empty(), "{} of {count} cases differ:\n{}", differences.len(), differences.join("\n"));
}

/// A model of `depth` levels of diamonds: `L<i>A` and `L<i>B` both extend `L<i-1>A` and
/// `L<i-1>B`, so that the ancestors of the last level are reached along 2^depth paths, and
/// every level takes its parents' implementations (`implement ... using parents`). At a depth
/// of twelve these are the corpus cases `inheritance/diamond_*` (recorded from the reference,
/// which takes minutes at forty levels).
#[derive(Clone, Copy)]
enum Diamond {
    /// Indexes, relations and inherited implementations of the last level.
    Evaluates,
    /// An instance of the last level given to a relation of an unrelated type.
    UnrelatedRelation,
    /// A constructor of the last level given an attribute no entity has.
    UnknownAttribute,
}

fn diamond_model(depth: usize, variant: Diamond) -> String {
    let mut lines: Vec<String> = [
        "# Entities in levels of diamonds: LiA and LiB both extend L(i-1)A and L(i-1)B, so that",
        "# the ancestors of the last level are reached along 2^depth paths.",
        "entity L0A:",
        "    string name",
        "end",
        "entity L0B:",
        "end",
        "index L0A(name)",
        "entity Holder:",
        "end",
        "implement Holder using std::none",
        "Holder.items [0:] -- L0B.holder [0:1]",
    ]
    .map(String::from)
    .to_vec();
    for level in 1..depth {
        for side in ['A', 'B'] {
            lines.push(format!("entity L{level}{side} extends L{}A, L{}B:", level - 1, level - 1));
            lines.push("end".to_string());
        }
        lines.push(format!("implement L{level}A using parents"));
        lines.push(format!("implement L{level}B using parents"));
    }
    lines.extend(
        [
            "implementation announce for L0A:",
            "    std::print(\"implemented {{self.name}}\")",
            "end",
            "implement L0A using announce when self.name == \"a\"",
            "implement L0B using std::none",
            "h = Holder()",
        ]
        .map(String::from),
    );
    let last = depth - 1;
    match variant {
        Diamond::Evaluates => lines.extend([
            format!("x = L{last}A(name=\"a\", holder=h)"),
            format!("y = L{last}B(name=\"b\", holder=h)"),
            "a = L0A[name=\"a\"]".to_string(),
            "std::print(a.name)".to_string(),
            "std::print(std::len(h.items))".to_string(),
            "for i in h.items:".to_string(),
            "    std::print(i.name)".to_string(),
            "end".to_string(),
        ]),
        Diamond::UnrelatedRelation => lines.extend([
            "entity Other:".to_string(),
            "end".to_string(),
            "implement Other using std::none".to_string(),
            "Other.thing [0:1] -- Holder".to_string(),
            format!("o = Other(thing=L{last}A(name=\"c\"))"),
        ]),
        Diamond::UnknownAttribute => lines.push(format!("z = L{last}A(name=\"c\", colour=\"red\")")),
    }
    lines.join("\n") + "\n"
}

/// A hierarchy of diamonds sixty levels deep evaluates as the twelve-level corpus cases do
/// (same status, prints and error kind): every walk over an entity's ancestors (its
/// defaults, its attribute names, the indexes a new instance joins, subclass checks, the
/// `implement`s it inherits, the search for an attribute) visits each ancestor once. Walking
/// every path took time exponential in the depth; the deadline only tells such a hang from a
/// slow machine. At twelve levels an instance has 2,048 inherited `implement`s with their
/// repetitions, as in the reference; at sixty each is kept once (`Model::implements_of`),
/// with the same result.
#[test]
fn deep_diamond_hierarchies_evaluate_as_shallow_ones_do() {
    for (case, variant) in [
        ("inheritance/diamond_hierarchy_indexes_and_relations", Diamond::Evaluates),
        ("inheritance/diamond_descendant_rejected_by_unrelated_relation", Diamond::UnrelatedRelation),
        ("inheritance/diamond_descendant_without_the_attribute_given", Diamond::UnknownAttribute),
    ] {
        check_deepened(case, |size| diamond_model(size, variant), 60);
    }
}

/// A chain of entities, each extending the one before: at a depth of twelve the corpus case
/// `inheritance/chain_of_entities`.
fn chain_model(depth: usize) -> String {
    let mut lines: Vec<String> = [
        "# A chain of entities, each extending the one before, with an index and a default at its root.",
        "entity E0:",
        "    string name",
        "    string kind = \"root\"",
        "end",
        "index E0(name)",
    ]
    .map(String::from)
    .to_vec();
    for level in 1..depth {
        lines.push(format!("entity E{level} extends E{}:", level - 1));
        lines.push("end".to_string());
    }
    let last = depth - 1;
    lines.extend([
        format!("implement E{last} using std::none"),
        format!("x = E{last}(name=\"a\")"),
        "y = E0[name=\"a\"]".to_string(),
        "std::print(y.name)".to_string(),
        "std::print(y.kind)".to_string(),
    ]);
    lines.join("\n") + "\n"
}

/// A chain of 20,000 entities evaluates as the twelve-level corpus case does. The lowering
/// asks every entity for its defaults and attributes, and walked its ancestors anew each
/// time: quadratic in the length, a minute for this chain in a release build.
#[test]
fn long_inheritance_chains_evaluate_as_short_ones_do() {
    check_deepened("inheritance/chain_of_entities", chain_model, 20_000);
}

/// A top level of `count` variables, each the one before: at twelve the corpus case
/// `variables/chain_of_assignments`.
fn assignment_chain_model(count: usize) -> String {
    let mut lines =
        vec!["# Each variable is the one before: a top level of many variables.".to_string(), "v0 = 1".to_string()];
    lines.extend((1..count).map(|i| format!("v{i} = v{}", i - 1)));
    lines.push(format!("std::print(v{})", count - 1));
    lines.join("\n") + "\n"
}

/// `count` typedefs, each refining the one before: at twelve the corpus case
/// `typedefs/chain_of_typedefs`.
fn typedef_chain_model(count: usize) -> String {
    let mut lines =
        vec!["# Each typedef refines the one before.".to_string(), "typedef t0 as int matching self > 0".to_string()];
    lines.extend((1..count).map(|i| format!("typedef t{i} as t{} matching self < {}", i - 1, 1000 + i)));
    lines.extend([
        "entity A:".to_string(),
        format!("    t{} v", count - 1),
        "end".to_string(),
        "implement A using std::none".to_string(),
        "a = A(v=5)".to_string(),
        "std::print(a.v)".to_string(),
    ]);
    lines.join("\n") + "\n"
}

/// A top level of 100,000 variables and a chain of 10,000 typedefs evaluate as their
/// twelve-long corpus cases do. Finding a variable scanned its block's list (quadratic in the
/// number of variables: 11 s for 200,000 in a release build), and the check that a typedef
/// chain ends scanned the typedefs passed at every step of every chain (cubic: 28 s for
/// 10,000).
#[test]
fn long_chains_of_variables_and_typedefs_evaluate_as_short_ones_do() {
    check_deepened("variables/chain_of_assignments", assignment_chain_model, 100_000);
    check_deepened("typedefs/chain_of_typedefs", typedef_chain_model, 10_000);
}

/// `count` variables, then a list literal and a dict literal that read every one of them: at
/// twelve the corpus case `variables/literals_reading_many_variables`.
fn literal_of_variables_model(count: usize) -> String {
    let mut lines = vec!["# A list literal and a dict literal that read many variables.".to_string()];
    lines.extend((0..count).map(|i| format!("v{i} = {i}")));
    lines.push(format!("l = [{}]", (0..count).map(|i| format!("v{i}")).collect::<Vec<_>>().join(", ")));
    lines.push(format!("d = {{{}}}", (0..count).map(|i| format!("\"k{i}\": v{i}")).collect::<Vec<_>>().join(", ")));
    lines.extend(["std::print(d[\"k7\"] + d[\"k5\"])", "std::print(3 in l)", "std::print(-1 in l)"].map(String::from));
    lines.join("\n") + "\n"
}

/// Literals that read 100,000 variables evaluate as the twelve-variable corpus case does. A
/// task found each of its requirements' values by a scan of them all (15 s for 100,000 in a
/// release build); beyond sixteen they are sorted and searched (`Values`).
#[test]
fn literals_reading_many_variables_evaluate_as_small_ones_do() {
    check_deepened("variables/literals_reading_many_variables", literal_of_variables_model, 100_000);
}

/// `count` instances, each calling two Python plugins of the case's module `pm`, which count
/// the calls: at twelve the corpus case `plugins/python_plugin_called_per_instance`.
fn python_calls_model(count: usize) -> String {
    let lines = [
        "# Every instance calls two Python plugins of its module, which count the calls.",
        "import pm",
        "",
        "entity Item:",
        "    int n",
        "    int id",
        "end",
        "index Item(n)",
        "implement Item using std::none",
        "",
        &format!("for i in std::sequence({count}):"),
        "    Item(n=pm::double(i), id=pm::next_id())",
        "end",
        "first = pm::next_id()",
        "item7 = Item[n=14]",
        "seventh = item7.id",
        "std::print(\"first={{first}} seventh={{seventh}}\")",
    ];
    lines.join("\n") + "\n"
}

/// 10,000 calls of a module's Python plugins evaluate as the corpus case's 24 do, with the
/// module's state kept between calls. Each call started a `python3` of its own (about 90 ms
/// here, and the count restarted at each); one server now answers them all (0.24 s).
#[test]
fn python_plugins_called_per_instance_evaluate_as_a_few_calls_do() {
    check_deepened("plugins/python_plugin_called_per_instance", python_calls_model, 5_000);
}

/// A host evaluates a program again and again with the same options (and so the same
/// modules): each evaluation gets its own Python servers, so the plugins' module state starts
/// afresh each time, as it does in each of the reference's compiles.
#[test]
fn python_plugin_state_does_not_carry_into_the_next_evaluation() {
    let dir = corpus().join("plugins/python_plugin_keeps_module_state");
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, &dir, &weft_frontend::project::LoadOptions { python_env: None });
    let program = std::sync::Arc::new(compiled.lowered.expect("the case compiles"));
    let modules = weft_runtime::modules::Modules::for_project(
        compiled.project.module_dirs(),
        compiled.project.path_plugin_packages.clone(),
    );
    let options = weft_runtime::Options { modules, ..weft_runtime::Options::default() };
    let first = weft_runtime::evaluate(program.clone(), &options);
    let second = weft_runtime::evaluate(program, &options);
    assert!(first.errors.is_empty(), "{:?}", first.errors);
    assert_eq!(first.prints, ["a=1 b=2", "x=100 y=101 x2=100"]);
    assert_eq!(second.prints, first.prints);
}

/// `count` instances, each given its attribute by an assignment of its own, in one block: at
/// twelve the corpus case `attributes/many_attributes_assigned_in_one_block`.
fn assigned_attributes_model(count: usize) -> String {
    let mut lines: Vec<String> = [
        "# Many instances, each given its attribute by an assignment of its own in one block.",
        "entity A:",
        "    int x",
        "end",
        "implement A using std::none",
    ]
    .map(String::from)
    .to_vec();
    for i in 0..count {
        lines.push(format!("a{i} = A()"));
        lines.push(format!("a{i}.x = {i}"));
    }
    lines.push("std::print(a7.x + a11.x)".to_string());
    lines.join("\n") + "\n"
}

/// A block of 100,000 instances and as many attribute assignments evaluates as the corpus case
/// of twelve does. The lowering looked up the variable at the root of each assignment in a list
/// of the block's variables (6.5 s for 200,000).
#[test]
fn blocks_of_many_attribute_assignments_evaluate_as_small_ones_do() {
    check_deepened("attributes/many_attributes_assigned_in_one_block", assigned_attributes_model, 100_000);
}

/// `count` questions `h.nodes is defined`, asked before the `count` elements of the relation
/// arrive: at twelve the corpus case `relations/is_defined_asked_of_one_relation_by_many`.
fn is_defined_model(count: usize) -> String {
    format!(
        "# Many `is defined` questions about one relation, asked before its elements arrive.
entity Hub:
end
entity Node:
    int i
end
Hub.nodes [0:] -- Node.hub [1]
implement Hub using std::none
implement Node using std::none
h = Hub()
answers = [h.nodes is defined for x in std::sequence({count})]
for i in std::sequence({count}):
    Node(i=i, hub=h)
end
std::print(std::unique(answers))
std::print(std::len(answers) == {count})
"
    )
}

/// 100,000 `is defined` questions about one relation evaluate as the corpus case of twelve
/// does. Each question listens to the relation: registering one scanned the listeners, and
/// each answered listener was removed from the middle of the list (4.4 s for 160,000).
#[test]
fn many_listeners_of_one_relation_evaluate_as_few_do() {
    check_deepened("relations/is_defined_asked_of_one_relation_by_many", is_defined_model, 100_000);
}

/// `count` members of a relation, each asking `is defined` of it in its implementation, once
/// elements have arrived: at twelve the corpus case
/// `relations/is_defined_asked_of_a_growing_relation_by_its_members`.
fn members_asking_model(count: usize) -> String {
    format!(
        "# Each member of a relation asks `is defined` of it, once elements have arrived.
entity Hub:
end
entity Node:
    int i
    bool c
end
Hub.nodes [0:] -- Node.hub [1]
implement Hub using std::none
implementation ask for Node:
    self.c = h.nodes is defined
end
implement Node using ask
h = Hub()
for i in std::sequence({count}):
    Node(i=i, hub=h)
end
answers = [n.c for n in h.nodes]
std::print(std::unique(answers))
std::print(std::len(answers) == {count})
"
    )
}

/// 40,000 members asking `is defined` of their relation evaluate as the corpus case of twelve
/// does. Each new listener was handed every element the relation had (20 s for 20,000); one
/// that is done (`is defined`, at the first element) is now handed no more.
#[test]
fn members_asking_of_their_relation_evaluate_as_few_do() {
    check_deepened("relations/is_defined_asked_of_a_growing_relation_by_its_members", members_asking_model, 40_000);
}

/// A pattern that would backtrack longer than weft allows (the corpus case
/// `typedefs/regex_with_a_backreference_that_backtracks_much` with forty `a`s instead of twenty,
/// about 2^40 steps: Python's `re` would run for days) is reported as undecided, never as a
/// value that does not match, which is what weft said before.
#[test]
fn patterns_that_backtrack_without_end_are_reported_undecided() {
    let case = corpus().join("typedefs/regex_with_a_backreference_that_backtracks_much");
    let source = std::fs::read_to_string(case.join("main.cf")).expect("readable");
    let deep = source.replace(&format!("\"{}c\"", "a".repeat(20)), &format!("\"{}c\"", "a".repeat(40)));
    assert_ne!(deep, source, "the case's value has twenty `a`s");
    let scratch = std::env::temp_dir().join(format!("weft-undecided-regex-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch directory");
    std::fs::write(scratch.join("main.cf"), deep).expect("writable");
    let outcome = compile(&scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(!outcome.ok);
    let message = outcome.cause_message.unwrap_or_default();
    assert!(message.starts_with("Could not decide whether"), "{message}");
    assert!(!message.contains("does not match"), "{message}");
}

/// A value is validated along a chain of typedefs in a loop, not by recursion: 10,000
/// typedefs evaluate on a stack of 4 MB. The recursion overflowed the CLI's 256 MB stack at
/// a million typedefs, and a stack overflow aborts the process.
#[test]
fn long_chains_of_typedefs_validate_without_recursion() {
    check_deepened_on_stack("typedefs/chain_of_typedefs", typedef_chain_model, 10_000, 4 << 20);
}

/// A dict literal of `count` keys: at twelve the corpus case
/// `lists_dicts/dict_literal_of_many_keys`.
fn dict_literal_model(count: usize) -> String {
    let entries: Vec<String> = (0..count).map(|i| format!("\"k{i}\": {i}")).collect();
    [
        "# A dict literal of many keys, then a lookup.".to_string(),
        format!("d = {{{}}}", entries.join(", ")),
        "std::print(d[\"k7\"])".to_string(),
        "std::print(d[\"k0\"] + d[\"k1\"])".to_string(),
    ]
    .join("\n")
        + "\n"
}

/// A dict literal of 100,000 keys evaluates as the twelve-key corpus case does. The parser's
/// check for a repeated key compared each key with every earlier one (9 s for 100,000).
#[test]
fn large_dict_literals_evaluate_as_small_ones_do() {
    check_deepened("lists_dicts/dict_literal_of_many_keys", dict_literal_model, 100_000);
}

/// An entity of `count` attributes, a constructor given most of them through two `**` dicts
/// (the second repeating `a3` if `repeat`), for at least twelve: at twelve the corpus cases
/// `constructors/splats_of_many_attributes` and `..._repeating_one`.
fn splat_model(count: usize, repeat: bool) -> String {
    let half = count / 2;
    let entries = |range: std::ops::Range<usize>| range.map(|i| format!("\"a{i}\": {i}")).collect::<Vec<_>>();
    let mut second = entries(half..count);
    if repeat {
        second.insert(0, "\"a3\": 3".to_string());
    }
    let mut lines = vec![
        if repeat {
            "# A constructor given most of its many attributes through two `**` dicts, one of them twice."
        } else {
            "# A constructor given most of its many attributes through two `**` dicts."
        }
        .to_string(),
    ];
    lines.push("entity A:".to_string());
    lines.extend((0..count).map(|i| format!("    int a{i}")));
    lines.extend([
        "end".to_string(),
        "index A(a1)".to_string(),
        "implement A using std::none".to_string(),
        format!("d1 = {{{}}}", entries(1..half).join(", ")),
        format!("d2 = {{{}}}", second.join(", ")),
        "x = A(a0=0, **d1, **d2)".to_string(),
        "y = A[a1=1]".to_string(),
        "std::print(y.a0)".to_string(),
        "std::print(x.a7 + x.a11)".to_string(),
    ]);
    lines.join("\n") + "\n"
}

/// A constructor given 40,000 attributes through `**` evaluates as the twelve-attribute corpus
/// cases do. Each name was compared with every name given before it and with every attribute
/// of the entity (1.05 s at 40,000).
#[test]
fn constructors_given_many_attributes_by_splats_evaluate_as_small_ones_do() {
    for (case, repeat) in [
        ("constructors/splats_of_many_attributes", false),
        ("constructors/splats_of_many_attributes_repeating_one", true),
    ] {
        check_deepened(case, |size| splat_model(size, repeat), 40_000);
    }
}

/// Lookups of every key of a dict of `count` keys, membership tests, and comparisons with a
/// dict of the same entries in reverse order and with one that differs in its last value: at
/// twelve the corpus case `lists_dicts/lookups_and_comparisons_of_a_large_dict`.
fn dict_lookup_model(count: usize) -> String {
    let entries = |order: &mut dyn Iterator<Item = usize>, last: Option<i64>| {
        order
            .map(|i| match last {
                Some(value) if i == count - 1 => format!("\"k{i}\": {value}"),
                _ => format!("\"k{i}\": {i}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let keys: Vec<String> = (0..count).map(|i| format!("\"k{i}\"")).collect();
    [
        "# Lookups of every key of a dict, and comparisons with dicts of the same keys.".to_string(),
        "entity Item:".to_string(),
        "    int v".to_string(),
        "end".to_string(),
        "index Item(v)".to_string(),
        "implement Item using std::none".to_string(),
        format!("d = {{{}}}", entries(&mut (0..count), None)),
        format!("e = {{{}}}", entries(&mut (0..count).rev(), None)),
        format!("f = {{{}}}", entries(&mut (0..count), Some(-1))),
        format!("keys = [{}]", keys.join(", ")),
        "for k in keys:".to_string(),
        "    Item(v=d[k])".to_string(),
        "    std::assert(k in d)".to_string(),
        "end".to_string(),
        "std::print(d == e)".to_string(),
        "std::print(d == f)".to_string(),
        "std::print(e == d)".to_string(),
        "std::print(\"k7\" in d)".to_string(),
        "std::print(\"absent\" in d)".to_string(),
        "std::print(d[\"k7\"] + e[\"k5\"])".to_string(),
        "seven = Item[v=7]".to_string(),
        "std::print(seven.v)".to_string(),
    ]
    .join("\n")
        + "\n"
}

/// Looking up each of 100,000 keys, and comparing dicts of 100,000 entries, evaluate as the
/// twelve-key corpus case does. A dict was a list of pairs that every lookup scanned: one
/// comparison of two dicts of 100,000 keys took ten seconds (Python hashes the keys, and so
/// does a large `Dict` now).
#[test]
fn lookups_in_large_dicts_evaluate_as_in_small_ones() {
    check_deepened("lists_dicts/lookups_and_comparisons_of_a_large_dict", dict_lookup_model, 100_000);
}

/// One `implement` of `count` implementations for a hundred instances: at twelve the corpus
/// case `implementations/many_implementations_of_one_entity`.
fn implementations_model(count: usize) -> String {
    let mut lines: Vec<String> = [
        "# One implement statement selecting many implementations, for many instances.",
        "entity A:",
        "    int v",
        "end",
        "implementation announce for A:",
        "    if self.v == 7:",
        "        std::print(\"seven\")",
        "    end",
        "end",
    ]
    .map(String::from)
    .to_vec();
    lines.extend((0..count).map(|k| format!("implementation i{k} for A:\nend")));
    let names: Vec<String> = (0..count).map(|k| format!("i{k}")).collect();
    lines.push(format!("implement A using announce, {}", names.join(", ")));
    lines.extend((0..100).map(|j| format!("a{j} = A(v={j})")));
    lines.join("\n") + "\n"
}

/// An entity of 40,000 implementations evaluates as the twelve-implementation corpus case
/// does. Each instance recorded its implementations in a list it scanned for every one:
/// quadratic in their number, 5.8 s for 20,000 in a release build.
#[test]
fn entities_of_many_implementations_evaluate_as_those_of_few_do() {
    check_deepened("implementations/many_implementations_of_one_entity", implementations_model, 40_000);
}

/// An entity of `count` attributes with defaults, extended twice: at twelve the corpus case
/// `attributes/entity_of_many_attributes`.
fn wide_entity_model(count: usize) -> String {
    let mut lines = vec![
        "# An entity of many attributes with defaults, and entities extending it.".to_string(),
        "entity A:".to_string(),
    ];
    lines.extend((0..count).map(|i| format!("    int a{i} = {i}")));
    lines.extend(
        [
            "end",
            "entity B extends A:",
            "    int a3 = 33",
            "end",
            "entity C extends B:",
            "end",
            "implement C using std::none",
            "c = C(a5=55)",
            "std::print(c.a3)",
            "std::print(c.a5)",
            "std::print(c.a7)",
        ]
        .map(String::from),
    );
    lines.join("\n") + "\n"
}

/// An entity of 100,000 attributes evaluates as the twelve-attribute corpus case does. The
/// checks of an entity's attributes and defaults, and the merging of inherited ones, found
/// each name by a scan of those before it (5.5 s for 40,000 in a release build).
#[test]
fn entities_of_many_attributes_evaluate_as_those_of_few_do() {
    check_deepened("attributes/entity_of_many_attributes", wide_entity_model, 100_000);
}

/// `count` entities, each with an index and an instance: at twelve the corpus case
/// `indexes/many_entities_with_an_index_each`.
fn many_entities_model(count: usize) -> String {
    let mut lines = vec!["# Many entities, each with an index and an instance.".to_string()];
    for i in 0..count {
        lines.extend([
            format!("entity E{i}:"),
            "    string name".to_string(),
            "end".to_string(),
            format!("index E{i}(name)"),
            format!("implement E{i} using std::none"),
            format!("e{i} = E{i}(name=\"x{i}\")"),
        ]);
    }
    lines.extend(["found = E7[name=\"x7\"]".to_string(), "std::print(found.name)".to_string()]);
    lines.join("\n") + "\n"
}

/// A model of 40,000 entities evaluates as the twelve-entity corpus case does, so that no
/// work per entity grows with the number of entities.
#[test]
fn models_of_many_entities_evaluate_as_those_of_few_do() {
    check_deepened("indexes/many_entities_with_an_index_each", many_entities_model, 40_000);
}

/// The stack of the thread `weft` evaluates on (`WORKER_STACK` in the CLI).
const WORKER_STACK: usize = 256 << 20;

/// The size of every shape's corpus case: twelve levels, entities, keys, attributes.
const RECORDED_SIZE: usize = 12;

/// Checks that the corpus case `case` is `model` at [`RECORDED_SIZE`], then that `model` at
/// `deep` evaluates within a deadline to the same status, prints and error kind as the case,
/// on a thread with the stack `weft` evaluates on.
fn check_deepened(case: &str, model: impl Fn(usize) -> String, deep: usize) {
    check_deepened_on_stack(case, model, deep, WORKER_STACK);
}

/// [`check_deepened`] on a thread of `stack` bytes.
fn check_deepened_on_stack(case: &str, model: impl Fn(usize) -> String, deep: usize, stack: usize) {
    const DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);
    let (shallow, deep) = (model(RECORDED_SIZE), model(deep));
    let recorded = corpus().join(case);
    assert_eq!(
        std::fs::read_to_string(recorded.join("main.cf")).expect("readable"),
        shallow,
        "{case} is the model at its recorded size"
    );
    let scratch = std::env::temp_dir().join(format!("weft-deepened-{}", std::process::id())).join(case);
    std::fs::create_dir_all(&scratch).expect("scratch directory");
    // The case's own modules, if it has any, come along.
    if recorded.join("libs").is_dir() {
        weft_tests::scratch::copy_tree(&recorded.join("libs"), &scratch.join("libs"));
    }
    std::fs::write(scratch.join("main.cf"), deep).expect("writable");
    let (sender, received) = std::sync::mpsc::channel();
    let dir = scratch.clone();
    std::thread::Builder::new()
        .stack_size(stack)
        .spawn(move || {
            // The receiver is gone only when the test already failed on the deadline.
            let _ = sender.send(compile(&dir));
        })
        .expect("a thread");
    let deep_outcome = received.recv_timeout(DEADLINE).unwrap_or_else(|_| panic!("{case}, deepened, hangs"));
    let _ = std::fs::remove_dir_all(&scratch);
    let shallow_outcome = compile(&recorded);
    assert_eq!(deep_outcome.ok, shallow_outcome.ok, "{case}");
    assert_eq!(deep_outcome.prints, shallow_outcome.prints, "{case}");
    assert_eq!(deep_outcome.error.map(|e| e.0), shallow_outcome.error.map(|e| e.0), "{case}");
}
