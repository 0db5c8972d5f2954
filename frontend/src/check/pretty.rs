//! Expressions as the reference prints them in messages: the `repr` of its AST nodes, as in
//! `does not match constraint `(self > 0)``.
//!
//! The reference folds a list or dict literal whose elements are all literals into one
//! constant, which prints as the Python value (`['a', 'b']`, `[1, True, null]`, where a bare
//! `true` prints as `true`); any other list prints its elements' reprs joined by `,` without a
//! space (`[self,1]`), and any other dict as `Dict()`. Calls join their arguments the same way
//! (`std::validate_type('pydantic.IPvAnyInterface',self)`), and every operator, `not`
//! included, is parenthesized.

use weft_ir::symbol::Interner;

use super::class_parts;
use crate::ast::{self, ExprKind};

/// `expr` as the reference's `repr` of it.
pub(crate) fn expr_text(interner: &Interner, expr: &ast::Expr<'_>) -> String {
    crate::with_stack(|| Printer { interner }.expr(expr))
}

struct Printer<'i> {
    interner: &'i Interner,
}

impl Printer<'_> {
    fn sym(&self, s: weft_ir::Symbol) -> &str {
        self.interner.resolve(s)
    }

    fn path(&self, parts: &[ast::Ident]) -> String {
        parts.iter().map(|p| self.sym(p.name)).collect::<Vec<_>>().join("::")
    }

    fn expr(&self, expr: &ast::Expr<'_>) -> String {
        if matches!(expr.kind, ExprKind::List(_) | ExprKind::Dict(_))
            && let Some(constant) = constant_repr(expr)
        {
            return constant;
        }
        match &expr.kind {
            ExprKind::Int(i) => i.to_string(),
            ExprKind::BigInt(s) => s.to_string(),
            ExprKind::Float(f) => weft_ir::value::float_repr(*f),
            ExprKind::Bool(true) => "true".into(),
            ExprKind::Bool(false) => "false".into(),
            ExprKind::Null => "null".into(),
            ExprKind::Str(lit) => weft_ir::value::str_repr(lit.value),
            ExprKind::RawStr(s) => weft_ir::value::str_repr(s),
            ExprKind::FStr(lit) => format!("f{}", weft_ir::value::str_repr(lit.value)),
            ExprKind::Regex(p) => format!("/{p}/"),
            ExprKind::Name(path) => self.path(path.parts),
            ExprKind::Attr { base, attr } => format!("{}.{}", self.expr(base), self.sym(attr.name)),
            ExprKind::Subscript { base, key } => format!("{}[{}]", self.expr(base), self.expr(key)),
            ExprKind::Call { func, args } => {
                let args: Vec<String> = args
                    .iter()
                    .map(|a| match a {
                        ast::Arg::Positional(e) => self.expr(e),
                        ast::Arg::Keyword(n, e) => format!("{}={}", self.sym(n.name), self.expr(e)),
                        ast::Arg::Splat(e, _) => format!("**{}", self.expr(e)),
                    })
                    .collect();
                format!("{}({})", self.path(func.parts), args.join(","))
            }
            ExprKind::Construct { class, .. } => format!("Construct({})", self.path(&class_parts(class))),
            ExprKind::IndexLookup { class, .. } => format!("{}[...]", self.path(&class_parts(class))),
            ExprKind::SelectorLookup { base, relation, .. } => {
                format!("{}.{}[...]", self.expr(base), self.sym(relation.name))
            }
            ExprKind::List(items) => {
                format!("[{}]", items.iter().map(|i| self.expr(i)).collect::<Vec<_>>().join(","))
            }
            ExprKind::ListComp { element, .. } => format!("[{} for ...]", self.expr(element)),
            ExprKind::Dict(_) => "Dict()".into(),
            ExprKind::Not(e) => format!("(not {})", self.expr(e)),
            ExprKind::Binary { op, lhs, rhs, .. } => {
                format!("({} {} {})", self.expr(lhs), op.symbol(), self.expr(rhs))
            }
            ExprKind::Conditional { cond, then, otherwise } => {
                format!("{} ? {} : {}", self.expr(cond), self.expr(then), self.expr(otherwise))
            }
            ExprKind::IsDefined(e) => format!("{} is defined", self.expr(e)),
        }
    }
}

/// A literal, or a list or dict of literals, as the Python value the reference folds it into
/// prints (`None` prints as `null`, the reference's own null); `None` for anything else.
fn constant_repr(expr: &ast::Expr<'_>) -> Option<String> {
    Some(match &expr.kind {
        ExprKind::Int(i) => i.to_string(),
        ExprKind::BigInt(s) => s.to_string(),
        ExprKind::Float(f) => weft_ir::value::float_repr(*f),
        ExprKind::Bool(true) => "True".into(),
        ExprKind::Bool(false) => "False".into(),
        ExprKind::Null => "null".into(),
        ExprKind::Str(lit) => weft_ir::value::str_repr(lit.value),
        ExprKind::RawStr(s) => weft_ir::value::str_repr(s),
        ExprKind::List(items) => {
            let items: Option<Vec<String>> = items.iter().map(constant_repr).collect();
            format!("[{}]", items?.join(", "))
        }
        ExprKind::Dict(entries) => {
            let entries: Option<Vec<String>> = entries
                .iter()
                .map(|e| Some(format!("{}: {}", weft_ir::value::str_repr(e.key), constant_repr(e.value)?)))
                .collect();
            format!("{{{}}}", entries?.join(", "))
        }
        _ => return None,
    })
}
