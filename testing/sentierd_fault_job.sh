#!/usr/bin/env bash
# sentierd_fault_job.sh — a test-only sentierd --job_command: makes one model's jobs crash or
# hang or wait, and runs every other job with the real sentierd.
#
#   FAULT_JOB_SENTIERD=/path/to/sentierd FAULT_JOB_CRASH_MODEL=crash-me \
#     sentierd --job_command=testing/sentierd_fault_job.sh --registry=REG --output=OUT ...
#
# The daemon runs it with sentierd's hidden job flags (--job --job_model=NAME ...):
#   FAULT_JOB_CRASH_MODEL=NAME  the job of model NAME dies of SIGABRT (as a crashing job would)
#   FAULT_JOB_HANG_MODEL=NAME   the job of model NAME sleeps until killed (--job_timeout_s)
#   FAULT_JOB_GATE_MODEL=NAME   the job of model NAME waits until the file FAULT_JOB_GATE exists
#                               (at most 10 minutes), then runs as any other: a job that is
#                               still running when a test kills its daemon, and completes later
#   FAULT_JOB_SENTIERD=PATH     the sentierd that runs the other jobs (required)
set -u
model=""
for a in "$@"; do
  case "$a" in --job_model=*) model="${a#--job_model=}" ;; esac
done
if [[ -n "$model" && "$model" == "${FAULT_JOB_CRASH_MODEL:-}" ]]; then
  kill -ABRT $$
fi
if [[ -n "$model" && "$model" == "${FAULT_JOB_HANG_MODEL:-}" ]]; then
  exec sleep 2147483647
fi
if [[ -n "$model" && "$model" == "${FAULT_JOB_GATE_MODEL:-}" ]]; then
  for ((i = 0; i < 6000; i++)); do
    [[ -e "${FAULT_JOB_GATE:?FAULT_JOB_GATE must name the gate file}" ]] && break
    sleep 0.1
  done
fi
exec "${FAULT_JOB_SENTIERD:?FAULT_JOB_SENTIERD must name the real sentierd}" "$@"
