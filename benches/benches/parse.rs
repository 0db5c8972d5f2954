//! The parse stage: lexing alone, and lexing plus parsing into the arena AST.
//!
//! Inputs are models made by `benches/gen_model.py` with `--flavor pure`: a large one
//! (`--hosts 5000`, about 6,900 lines) for throughput and a small one (`--hosts 100`, about
//! 430 lines) that shows the fixed cost of one call. Throughput is reported in lines of source
//! (criterion's "elements"), the unit of the project's goal for this stage.
//!
//! Run with `cargo bench -p weft-benches --bench parse`.

use bumpalo::Bump;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use weft_benches::{Flavor, Model, generated_model};
use weft_frontend::lexer::{Lexer, TokenKind};
use weft_ir::{FileId, Interner};

/// The `weft` binary's global allocator (see `cli/src/main.rs`), so that the figures are the
/// binary's: the system allocator makes evaluation about a quarter slower.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The model sizes, largest first: the large one is what the goal is stated for.
const HOSTS: [u32; 2] = [5000, 100];

fn models() -> Vec<Model> {
    HOSTS.iter().map(|&hosts| generated_model(hosts, Flavor::Pure)).collect()
}

/// Lexes the whole text the way the parser drives the lexer, one token at a time, and returns
/// the number of tokens.
fn lex(src: &str) -> usize {
    let mut lexer = Lexer::new(src, FileId(0));
    let mut count = 0;
    loop {
        // The parser stores every token it reads, so the bench makes sure each one is built.
        let token = black_box(lexer.next_token());
        count += 1;
        if token.kind == TokenKind::Eof {
            return count;
        }
    }
}

/// A bench of a model that does not parse cleanly would measure error recovery, not parsing.
fn check_model(model: &Model) {
    let lexer_errors = weft_frontend::lexer::tokenize(&model.source).1;
    assert!(lexer_errors.is_empty(), "the generated model {} does not lex: {lexer_errors:?}", model.name);
    let arena = Bump::new();
    let output = weft_frontend::parse_file(&arena, &model.source, FileId(0), &mut Interner::new());
    assert!(!output.has_errors(), "the generated model {} does not parse: {:?}", model.name, output.diagnostics);
}

fn bench_parse(c: &mut Criterion) {
    let models = models();
    for model in &models {
        check_model(model);
    }

    let mut group = c.benchmark_group("lex");
    for model in &models {
        group.throughput(Throughput::Elements(model.lines));
        group.bench_with_input(BenchmarkId::from_parameter(&model.name), model.source.as_str(), |b, src| {
            b.iter(|| lex(black_box(src)))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("lex_parse");
    for model in &models {
        group.throughput(Throughput::Elements(model.lines));
        group.bench_with_input(BenchmarkId::from_parameter(&model.name), model.source.as_str(), |b, src| {
            // One arena for all iterations, reset before each parse, as the compiler uses it:
            // after the first iteration the parse allocates no new chunks.
            let mut arena = Bump::new();
            b.iter(|| {
                arena.reset();
                // A fresh interner per iteration: every identifier is interned from scratch,
                // as for the first file of a compile, which is the slower case.
                let mut interner = Interner::new();
                let output = weft_frontend::parse_file(&arena, black_box(src), FileId(0), &mut interner);
                black_box(&output.file);
                output.diagnostics.len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_parse);
criterion_main!(benches);
