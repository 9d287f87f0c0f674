// rule_parser.cc — a line-oriented recursive-descent parser for rule files.
//
// The grammar is in patterns/README.md. Each rule is a block from `rule NAME` to `end`; inside it,
// attribute lines (`family`, `description`, `min_group`, `stacked_min_group`, `max_group`,
// `any_batch_size`) and
// sections (`match` or `group`, `key`, `where`, `rewrite`). Lines are tokenized one at a time
// (internal/rule_lexer.h) so that every error can name its file, line and column.
//
// This file reads the blocks: the `rule NAME` line, attribute lines, section headers, which
// `foreach` block a pattern line belongs to, and the checks on a whole rule. The lines inside
// sections are parsed by the parts in internal/rule_parser_parts.h.
#include "passes/rule_parser.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "passes/internal/rule_lexer.h"
#include "passes/internal/rule_parser_parts.h"
#include "passes/status_macros.h"

namespace sentier {
namespace {

using internal::LexLine;
using internal::StripComment;
using internal::Token;
using internal::TokenStream;

enum class Section { kNone, kMatch, kKey, kWhere, kRewrite };

// What ParseRule knows while it reads one rule's lines.
struct RuleInProgress {
  Rule rule;
  size_t start = 0;                     // index of the `rule NAME` line
  std::vector<std::string> normalized;  // the rule's lines without comments and spacing
  Section section = Section::kNone;     // the section the next plain line belongs to
  bool saw_match = false;
  bool saw_rewrite = false;
  bool saw_end = false;
  ForeachPattern* open_foreach = nullptr;  // the `foreach` block indented lines join
  int foreach_indent = 0;                  // indentation of its header
};

class FileParser {
 public:
  FileParser(absl::string_view text, absl::string_view file) : file_(file) {
    lines_ = absl::StrSplit(text, '\n');
  }

  absl::StatusOr<std::vector<Rule>> Parse() {
    std::vector<Rule> rules;
    while (line_no_ < lines_.size()) {
      std::string content = StripComment(lines_[line_no_]);
      if (absl::StripAsciiWhitespace(content).empty()) {
        ++line_no_;
        continue;
      }
      SENTIER_ASSIGN_OR_RETURN(tokens, LexLineAt(line_no_));
      TokenStream ts(tokens, Loc(line_no_, 1));
      if (!ts.IsIdent("rule")) {
        return ts.ErrorHere(absl::StrCat("expected 'rule NAME'", ts.Found()));
      }
      SENTIER_ASSIGN_OR_RETURN(rule, ParseRule());
      rules.push_back(std::move(rule));
    }
    return rules;
  }

 private:
  SourceLoc Loc(size_t line_index, int col) const {
    SourceLoc l;
    l.file = std::string(file_);
    l.line = static_cast<int>(line_index) + 1;
    l.col = col;
    return l;
  }
  absl::StatusOr<std::vector<Token>> LexLineAt(size_t index) {
    std::string content = StripComment(lines_[index]);
    return LexLine(content, Loc(index, 1));
  }
  int IndentOf(size_t index) const {
    int n = 0;
    for (char c : lines_[index]) {
      if (c == ' ') {
        ++n;
      } else if (c == '\t') {
        n += 8 - n % 8;
      } else {
        break;
      }
    }
    return n;
  }
  absl::Status Error(size_t index, int col, absl::string_view msg) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, ":", index + 1, ":", col, ": ", msg));
  }

  // One rule, from its `rule NAME` line (the current line) through `end`.
  absl::StatusOr<Rule> ParseRule() {
    RuleInProgress r;
    r.start = line_no_;
    SENTIER_RETURN_IF_ERROR(ParseRuleHeader(&r));
    while (line_no_ < lines_.size() && !r.saw_end) {
      SENTIER_RETURN_IF_ERROR(ParseRuleLine(&r));
    }
    SENTIER_RETURN_IF_ERROR(CheckRule(r));
    r.rule.normalized_text = absl::StrJoin(r.normalized, "\n");
    return std::move(r.rule);
  }

  // `rule NAME`; the name is one identifier without ':'.
  absl::Status ParseRuleHeader(RuleInProgress* r) {
    SENTIER_ASSIGN_OR_RETURN(head, LexLineAt(line_no_));
    TokenStream hs(head, Loc(line_no_, 1));
    r->rule.loc = hs.LocHere();
    hs.Next();  // 'rule'
    if (hs.Peek().kind != Token::Kind::kIdent || hs.Peek().text.find(':') != std::string::npos) {
      return hs.ErrorHere(absl::StrCat("expected a rule name", hs.Found()));
    }
    r->rule.name = hs.Next().text;
    SENTIER_RETURN_IF_ERROR(hs.ExpectEnd());
    r->normalized = {absl::StrCat("rule ", r->rule.name)};
    ++line_no_;
    return absl::OkStatus();
  }

  // The current line of a rule's body: blank, `end`, an attribute, a section header or a line of
  // the open section. Moves past it.
  absl::Status ParseRuleLine(RuleInProgress* r) {
    std::string content = StripComment(lines_[line_no_]);
    std::string trimmed(absl::StripAsciiWhitespace(content));
    if (trimmed.empty()) {
      ++line_no_;
      return absl::OkStatus();
    }
    // Attribute lines carry free text, so they are split before lexing.
    std::string keyword = trimmed.substr(0, trimmed.find_first_of(" \t"));
    int col = static_cast<int>(content.find(keyword)) + 1;
    if (keyword == "end") {
      if (trimmed != "end") return Error(line_no_, col, "unexpected text after 'end'");
      r->saw_end = true;
    } else if (keyword == "rule") {
      return Error(line_no_, col,
                   absl::StrCat("rule '", r->rule.name, "' (line ", r->start + 1,
                                ") is missing 'end' before the next rule"));
    } else if (keyword == "min_group" || keyword == "max_group" || keyword == "stacked_min_group") {
      SENTIER_RETURN_IF_ERROR(ParseGroupSize(keyword, trimmed, col, r));
    } else if (keyword == "any_batch_size") {
      if (trimmed != keyword) return Error(line_no_, col, "'any_batch_size' takes no value");
      r->rule.any_batch_size = true;
      r->normalized.push_back(keyword);
      r->section = Section::kNone;
    } else if (keyword == "description" || keyword == "family") {
      SENTIER_RETURN_IF_ERROR(ParseTextAttribute(keyword, trimmed, col, r));
    } else if (trimmed == "match" || trimmed == "group" || trimmed == "key" ||
               trimmed == "where" || trimmed == "rewrite") {
      SENTIER_RETURN_IF_ERROR(OpenSection(trimmed, col, r));
    } else {
      r->normalized.push_back(trimmed);
      SENTIER_RETURN_IF_ERROR(ParseSectionLine(r));
    }
    ++line_no_;
    return absl::OkStatus();
  }

  // `min_group N` / `stacked_min_group N` / `max_group N` with N >= 1.
  absl::Status ParseGroupSize(const std::string& keyword, const std::string& trimmed, int col,
                              RuleInProgress* r) {
    std::string value(absl::StripAsciiWhitespace(trimmed.substr(keyword.size())));
    int64_t v = 0;
    if (!absl::SimpleAtoi(value, &v) || v < 1) {
      return Error(line_no_, col + static_cast<int>(keyword.size()) + 1,
                   absl::StrCat("'", keyword, "' needs a positive integer"));
    }
    (keyword == "min_group"           ? r->rule.min_group
     : keyword == "stacked_min_group" ? r->rule.stacked_min_group
                                      : r->rule.max_group) = v;
    r->normalized.push_back(absl::StrCat(keyword, " ", v));
    r->section = Section::kNone;
    return absl::OkStatus();
  }

  // `description free text` / `family one_word`.
  absl::Status ParseTextAttribute(const std::string& keyword, const std::string& trimmed, int col,
                                  RuleInProgress* r) {
    std::string value(absl::StripAsciiWhitespace(trimmed.substr(keyword.size())));
    if (value.empty()) return Error(line_no_, col, absl::StrCat("'", keyword, "' needs a value"));
    if (keyword == "family") {
      for (char c : value) {
        if (!internal::IsIdentChar(c)) {
          return Error(line_no_, col + static_cast<int>(keyword.size()) + 1,
                       "a family is one word ([A-Za-z0-9_.])");
        }
      }
      r->rule.family = value;
    } else {
      r->rule.description = value;
    }
    r->normalized.push_back(absl::StrCat(keyword, " ", value));
    r->section = Section::kNone;
    return absl::OkStatus();
  }

  // A section header: `match` or `group` (once), `key` (group rules only), `where`, `rewrite`
  // (once). Closes any open `foreach` block.
  absl::Status OpenSection(const std::string& header, int col, RuleInProgress* r) {
    if (header == "match" || header == "group") {
      if (r->saw_match) return Error(line_no_, col, "a rule has one 'match' or 'group' section");
      r->section = Section::kMatch;
      r->saw_match = true;
      r->rule.is_group = header == "group";
    } else if (header == "key") {
      if (!r->rule.is_group) return Error(line_no_, col, "'key' belongs to a 'group' rule");
      r->section = Section::kKey;
    } else if (header == "where") {
      r->section = Section::kWhere;
    } else {
      if (r->saw_rewrite) return Error(line_no_, col, "a rule has one 'rewrite' section");
      r->section = Section::kRewrite;
      r->saw_rewrite = true;
    }
    r->open_foreach = nullptr;
    r->normalized.push_back(header);
    return absl::OkStatus();
  }

  // A line inside the open section: a pattern line or `foreach` header, a `key` or `where`
  // expression, or a rewrite statement.
  absl::Status ParseSectionLine(RuleInProgress* r) {
    SENTIER_ASSIGN_OR_RETURN(tokens, LexLineAt(line_no_));
    TokenStream ts(tokens, Loc(line_no_, 1));
    switch (r->section) {
      case Section::kNone:
        return ts.ErrorHere(absl::StrCat(
            "expected 'family', 'description', 'match', 'group', 'key', 'where', 'rewrite' "
            "or 'end'",
            ts.Found()));
      case Section::kMatch:
        return ParseMatchLine(ts, r);
      case Section::kWhere:
      case Section::kKey: {
        SENTIER_ASSIGN_OR_RETURN(e, internal::ParseExpr(ts));
        SENTIER_RETURN_IF_ERROR(ts.ExpectEnd());
        (r->section == Section::kKey ? r->rule.key : r->rule.where).push_back(e);
        return absl::OkStatus();
      }
      case Section::kRewrite: {
        SENTIER_ASSIGN_OR_RETURN(stmt, internal::ParseRewriteLine(ts));
        r->rule.rewrite.push_back(std::move(stmt));
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  // A line of the `match` section: a `foreach` header opens a block; a pattern line joins the
  // open block when indented deeper than its header, else the main pattern (which must come
  // before any block).
  absl::Status ParseMatchLine(TokenStream& ts, RuleInProgress* r) {
    int indent = IndentOf(line_no_);
    if (r->open_foreach != nullptr && indent <= r->foreach_indent) r->open_foreach = nullptr;
    if (ts.IsIdent("foreach")) {
      SENTIER_ASSIGN_OR_RETURN(fe, internal::ParseForeachHeader(ts));
      r->rule.foreach.push_back(std::move(fe));
      r->open_foreach = &r->rule.foreach.back();
      r->foreach_indent = indent;
      return absl::OkStatus();
    }
    SENTIER_ASSIGN_OR_RETURN(node, internal::ParsePatternLine(ts));
    if (r->open_foreach != nullptr) {
      r->open_foreach->nodes.push_back(std::move(node));
    } else {
      if (!r->rule.foreach.empty()) {
        return ts.ErrorAt(ts.Peek(0),
                          "pattern lines after a 'foreach' block must be indented under it "
                          "(write the main pattern first)");
      }
      r->rule.match.push_back(std::move(node));
    }
    return absl::OkStatus();
  }

  // The checks on a whole rule once its lines are read, in a fixed order (the first failing one
  // is reported, at the `rule` line).
  absl::Status CheckRule(const RuleInProgress& r) const {
    const Rule& rule = r.rule;
    auto error = [&](absl::string_view msg) { return Error(r.start, 1, msg); };
    if (!r.saw_end) return error(absl::StrCat("rule '", rule.name, "' is missing 'end'"));
    if (!r.saw_match) {
      return error(absl::StrCat("rule '", rule.name, "' has no 'match' or 'group' section"));
    }
    if (rule.is_group && !rule.foreach.empty()) {
      return error(absl::StrCat("group rule '", rule.name, "' cannot use 'foreach'"));
    }
    if (rule.min_group > rule.max_group || rule.stacked_min_group > rule.max_group) {
      return error(absl::StrCat("rule '", rule.name, "': min_group > max_group"));
    }
    if (rule.stacked_min_group > 0 && !rule.is_group) {
      return error(absl::StrCat("'stacked_min_group' belongs to a 'group' rule ('", rule.name,
                                "' is a match rule)"));
    }
    if (rule.any_batch_size && !rule.is_group) {
      return error(absl::StrCat("'any_batch_size' belongs to a 'group' rule ('", rule.name,
                                "' is a match rule)"));
    }
    if (rule.match.empty()) {
      return error(absl::StrCat("rule '", rule.name, "' has an empty 'match' section"));
    }
    if (!r.saw_rewrite || rule.rewrite.empty()) {
      return error(absl::StrCat("rule '", rule.name, "' has no 'rewrite' section"));
    }
    if (rule.family.empty()) return error(absl::StrCat("rule '", rule.name, "' needs a 'family'"));
    if (rule.description.empty()) {
      return error(absl::StrCat("rule '", rule.name, "' needs a 'description'"));
    }
    for (const ForeachPattern& fe : rule.foreach) {
      if (fe.nodes.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(fe.loc.ToString(), ": 'foreach' block has no indented pattern lines"));
      }
    }
    return absl::OkStatus();
  }

  absl::string_view file_;
  std::vector<absl::string_view> lines_;
  size_t line_no_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<Rule>> ParseRules(absl::string_view text, absl::string_view file) {
  FileParser parser(text, file);
  return parser.Parse();
}

absl::StatusOr<ExprPtr> ParseExpression(absl::string_view text, absl::string_view file,
                                        int line) {
  SourceLoc loc;
  loc.file = std::string(file);
  loc.line = line;
  std::string content = StripComment(text);
  SENTIER_ASSIGN_OR_RETURN(tokens, LexLine(content, loc));
  TokenStream ts(tokens, loc);
  SENTIER_ASSIGN_OR_RETURN(e, internal::ParseExpr(ts));
  SENTIER_RETURN_IF_ERROR(ts.ExpectEnd());
  return e;
}

}  // namespace sentier
