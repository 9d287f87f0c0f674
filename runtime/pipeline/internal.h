// internal.h — the stage functions of the optimization pipeline that more than one of its
// files calls (the stages and their order: runtime/pipeline/stages.h). Private to the pipeline
// library.
#ifndef SENTIER_RUNTIME_PIPELINE_INTERNAL_H_
#define SENTIER_RUNTIME_PIPELINE_INTERNAL_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/pipeline/stages.h"

namespace sentier {

inline bool IsTrainingStep(ValidationMode mode) { return mode != ValidationMode::kInference; }

// rewrite: canonicalization and the rules on `loaded`'s graph, in place (OptimizeGraph).
absl::StatusOr<OptimizeReport> Rewrite(const PipelineRequest& req, const RuleSet& rules, LoadedModel* loaded);

// count: aten ops and kernel launches of one forward of the rewritten graph and, where the
// original's were counted, of one training step; InvalidArgument where it no longer runs.
absl::StatusOr<OpCounts> CountRewrittenOps(const LoadedModel& loaded);

// untimed: whether the ablation applies (nothing timed, the rewrite makes no fewer kernel
// launches than the original), and the ablation itself (untimed.cc); none where no
// rewrite without some of the rules that fired makes fewer launches.
bool UntimedAblationApplies(const PipelineRequest& req, const LoadedModel& loaded, const Placement& placement,
                            bool gated, const OptimizeReport& report, const OpCounts& ops_after);
std::optional<UntimedAblation> DropRulesThatAddLaunches(const PipelineRequest& req,
                                                        std::shared_ptr<const RuleSet> rules,
                                                        const LoadedModel& original, const OptimizeReport& report,
                                                        const OpCounts& ops_after);

// validate: the saved artifact, loaded back through its format, against the original
// (validate.cc). Unavailable: the artifact's step stalls under the executor;
// FailedPrecondition: the artifact does not load; InvalidArgument: not equivalent.
absl::StatusOr<Validation> Validate(const PipelineRequest& req, const LoadedModel& loaded,
                                    const Placement& placement, const std::optional<GateSelection>& gate,
                                    std::optional<int64_t> reused_from);

// advise: whether it applies (the original layout asked for, a module with sample inputs whose
// ops were counted), and the advice itself (advise.cc); none where nothing would be stored stacked.
bool AdviceApplies(const PipelineRequest& req, const LoadedModel& loaded);
std::optional<StackedLayoutAdvice> AdviseStackedLayout(const PipelineRequest& req, const LoadedModel& original,
                                                       const std::shared_ptr<const RuleSet>& rules,
                                                       const Placement& placement);

// param_layout auto (advise.cc): the version decided in the original layout and, where the
// advice says the stacked layout would give at least kAutoLayoutMinGain times its gain, in the
// stacked layout too; the better published, Outcome::layout_choice saying why.
Outcome OptimizeInAutoLayout(const PipelineRequest& req);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_PIPELINE_INTERNAL_H_
