// status_macros.h — the one way Sentier propagates an absl::Status out of a function.
//
//   SENTIER_RETURN_IF_ERROR(CheckExpr(*w, names));          // returns the status if not ok
//   SENTIER_ASSIGN_OR_RETURN(items, ItemsOf(args[0]));       // declares `auto items` or returns
//
// Both evaluate the expression once. SENTIER_ASSIGN_OR_RETURN declares `<name>_or` beside the
// name, so one name can be bound once per scope.
#ifndef SENTIER_PASSES_STATUS_MACROS_H_
#define SENTIER_PASSES_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SENTIER_RETURN_IF_ERROR(expr)          \
  do {                                         \
    ::absl::Status sentier_status_ = (expr);   \
    if (!sentier_status_.ok()) return sentier_status_; \
  } while (0)

#define SENTIER_ASSIGN_OR_RETURN(lhs, expr)            \
  auto lhs##_or = (expr);                              \
  if (!lhs##_or.ok()) return std::move(lhs##_or).status(); \
  auto lhs = std::move(*lhs##_or)

#endif  // SENTIER_PASSES_STATUS_MACROS_H_
