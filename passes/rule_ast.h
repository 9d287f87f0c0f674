// rule_ast.h — the syntax tree of Sentier's text rule language.
//
// A rule file is parsed by RuleParser (rule_parser.h) into these plain structs. They carry no
// LibTorch types: compilation against the operator registry happens in RuleSet (rule_set.h).
// The language itself is documented for users in patterns/README.md.
//
// Example:
//   rule cat_of_all_split_pieces
//     family vertical
//     description cat of every piece of a split, in order, on the split dim is the split input
//     match
//       %parts = aten::split_with_sizes(%x, $sizes, $d)
//       %p... = prim::ListUnpack(%parts)
//       %l = prim::ListConstruct(%p...)
//       %y = aten::cat(%l, $d)
//     rewrite
//       replace %y with %x
//   end
#ifndef SENTIER_PASSES_RULE_AST_H_
#define SENTIER_PASSES_RULE_AST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sentier {

// SourceLoc: where something was written, for `file:line:col: message` errors.
struct SourceLoc {
  std::string file;
  int line = 0;
  int col = 0;
  std::string ToString() const {
    return file + ":" + std::to_string(line) + ":" + std::to_string(col);
  }
};

// Expr: an expression in a `where` constraint or a rewrite argument.
struct Expr {
  enum class Kind {
    kInt,       // 3
    kFloat,     // 1.5
    kBool,      // true / false
    kNone,      // None
    kString,    // "aten::squeeze"
    kConstRef,  // $name or $name...
    kValueRef,  // %name or %name...
    kCall,      // name(args...)
    kList,      // [a, b, c...]
    kBinary,    // a + b, a == b, a and b, ...
    kUnary,     // -a, not a
    kIndex,     // a[i]
  };
  Kind kind = Kind::kNone;
  int64_t int_value = 0;
  double float_value = 0.0;
  bool bool_value = false;
  std::string text;       // name, string literal, or operator ("+", "==", "and", ...)
  bool variadic = false;  // for refs: written with a trailing "..."
  std::vector<std::shared_ptr<const Expr>> args;
  SourceLoc loc;
};
using ExprPtr = std::shared_ptr<const Expr>;

// PatternArg: one input of a pattern node.
struct PatternArg {
  enum class Kind {
    kValue,     // %x   (binds, or must equal the value already bound to x)
    kConst,     // $c   (the input must be a prim::Constant; binds its value)
    kLiteral,   // 1, [1, 2], None, true: the input must be a constant equal to this
    kWildcard,  // _    (anything)
  };
  Kind kind = Kind::kWildcard;
  std::string name;
  bool variadic = false;  // %xs... or _... : matches all remaining inputs
  ExprPtr literal;
  SourceLoc loc;
};

// PatternOutput: one output of a pattern node.
struct PatternOutput {
  std::string name;       // empty for `_`
  bool variadic = false;  // %ps... : all outputs of the node
  SourceLoc loc;
};

// PatternNode: `%outs = op(args) [@ $k]`.
struct PatternNode {
  std::vector<PatternOutput> outputs;
  std::string op;  // a literal op name (aten::cat) or an RE2 alternative (aten::(relu|tanh))
  SourceLoc op_loc;
  std::vector<PatternArg> args;
  // With `@ $k` the node may have any number of outputs; outputs[0] is output number $k.
  std::string output_index;
  SourceLoc loc;
};

// ForeachPattern: `foreach %e[, %n, $k...] in %seq...:` followed by indented pattern lines.
// Every element of %seq must match the nested pattern; names listed in the header are bound per
// element and become sequences (`%n...`, `$k...`) after the block; all other names are shared and
// must bind to the same thing for every element.
struct ForeachPattern {
  std::string element;             // the name each element is bound to inside the block
  std::string sequence;            // the variadic capture it iterates over
  std::vector<std::string> per_element;  // names ("%n", "$k") collected per element
  std::vector<PatternNode> nodes;
  SourceLoc loc;
};

// RewriteStmt: one line of a rewrite section.
struct RewriteStmt {
  enum class Kind {
    kInsert,   // %out = aten::op(args)          (inserted before the anchor)
    kUnpack,   // %outs... = unpack(list_expr, count_expr)
    kReplace,  // replace A with B                (A, B: value or value sequence)
    kCall,     // call builtin(args)               (a named builtin transform)
    kEach,     // %outs... = each aten::op(args)  (one node per member of the sequences)
    kConstants,  // %outs... = constants(list_expr) (one constant value per list element)
    kScan,     // %outs... = scan aten::op(%xs..., args) (running op: out_0 = x_0, out_k = op(out_k-1, x_k, args))
  };
  Kind kind = Kind::kInsert;
  std::string output;  // kInsert/kUnpack: the name defined (without %)
  // kInsert of an operator with several outputs (`%bag, _, _, _ = aten::embedding_bag(...)`):
  // one name per output, in order ("" for `_`); empty for the one-output form.
  std::vector<std::string> outputs;
  std::string op;      // kInsert/kEach/kScan: the operator; kCall: the builtin's name
  std::vector<ExprPtr> args;
  // kInsert/kEach/kScan: keyword arguments (`alpha=$a`), required for keyword-only schema arguments.
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr from;  // kReplace
  ExprPtr to;    // kReplace
  SourceLoc loc;
};

// Rule: one parsed rule.
//
// A group rule (horizontal batching) writes `group` instead of `match`: its pattern is matched
// once per member, members whose `key` expressions evaluate equal are batched together, and the
// rewrite runs once per group with every per-member capture turned into a sequence (`%x...`).
struct Rule {
  std::string name;
  std::string family;
  std::string description;
  SourceLoc loc;
  bool is_group = false;              // `group` section instead of `match`
  std::vector<ExprPtr> key;           // group rules: grouping key, one expression per line
  int64_t min_group = 2;              // group rules: smallest group rewritten
  // group rules: the smallest group with --param_layout=stacked (the concatenated or stacked
  // parameters are stored, not built at every step); -1: min_group.
  int64_t stacked_min_group = -1;
  int64_t max_group = 256;            // group rules: largest group (bigger buckets are cut)
  // group rules: members need not be proven to have equal sizes in the dims that follow the
  // batch (the rewrite concatenates and splits by each member's runtime size instead of stacking).
  bool any_batch_size = false;
  std::vector<PatternNode> match;     // in written order; the last one is the anchor
  std::vector<ForeachPattern> foreach;
  std::vector<ExprPtr> where;
  std::vector<RewriteStmt> rewrite;
  std::string normalized_text;  // whitespace- and comment-normalized text, for fingerprints
};

}  // namespace sentier

#endif  // SENTIER_PASSES_RULE_AST_H_
