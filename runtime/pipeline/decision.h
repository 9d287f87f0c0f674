// decision.h — the decide stage of the optimization pipeline (pipeline.h): which
// status an outcome gets, the clause that decided it, and the one wording of every reason.
// Internal to the pipeline library; its test drives it with outcomes built by hand.
//
//   Decision d = MakeDecision(request, outcome);   // status, clause, reason
//   Decide(request, &outcome);                      // the same, applied to the outcome
#ifndef SENTIER_RUNTIME_PIPELINE_DECISION_H_
#define SENTIER_RUNTIME_PIPELINE_DECISION_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "runtime/pipeline/stages.h"

namespace sentier {

// Decide: an outcome whose stages all ran is optimized, or unchanged with the clause that kept
// the original: nothing fired (or the gate kept nothing: the gate's clause), the timed artifact
// was not faster or needed more memory (runtime/verdict.h), or, with nothing timed, the graph
// runs more aten ops than the original (unless allow_growth).
// Where an earlier version's decision was reused (outcome.reused_from), the reason says so first.
Decision MakeDecision(const PipelineRequest& request, const Outcome& outcome);
// MakeFreshDecision: MakeDecision without the reuse's wording.
Decision MakeFreshDecision(const PipelineRequest& request, const Outcome& outcome);

// ApplyDecision: the decision's fields into the outcome (status, clause, reason, memory).
void ApplyDecision(const Decision& decision, Outcome* outcome);
// Decide / DecideFresh: MakeDecision / MakeFreshDecision, applied.
void Decide(const PipelineRequest& request, Outcome* outcome);
void DecideFresh(const PipelineRequest& request, Outcome* outcome);

// JudgedStep: the figures that decide in a validation's check, the original's or the artifact's:
// the training step unless only the forward is judged.
StepFigures JudgedStep(ValidationMode mode, const CheckReport& check, bool original);

// WhyTimeTheOriginalAgain: in a validation that carried the original's step figures from the gate
// or from a reused decision (`carried`: the artifact's timing with them), why the original must be
// timed here after all, alternated with the artifact; empty where the carried figures stand. They
// do not where the artifact was timed another way (a timing fallback), or where its judged step
// is not faster than the carried one: the verdict they came with is contradicted, and two
// timings of one graph taken apart can differ by 1.3x and more (feature_groups on the H200: the
// artifact 2.249 ms against the gate's 1.461 ms of the original; 1.00x in the A/B alternated).
std::string WhyTimeTheOriginalAgain(const PipelineRequest& req, const CheckReport& carried,
                                    const VerdictMargins& margins);

// Fail: `stage` stopped the pipeline; applied to the outcome (the failure's one writer). A rejection's reason is "<what>: <message>"; with
// `output`, the output could not be written (output_failed: a daemon retries the version).
void Fail(PipelineStage stage, absl::string_view what, const absl::Status& status, bool output,
          Outcome* outcome);

// MemoryHint: where the memory bound held back a faster set of every rule, what a model's owner
// can allow for it (appended to the reason); empty otherwise.
std::string MemoryHint(const PipelineRequest& request, const Outcome& outcome);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_PIPELINE_DECISION_H_
