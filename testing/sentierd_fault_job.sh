#!/usr/bin/env bash
# sentierd_fault_job.sh — a test-only sentierd --job_command: makes one model's jobs crash or
# hang, and runs every other job with the real sentierd.
#
#   FAULT_JOB_SENTIERD=/path/to/sentierd FAULT_JOB_CRASH_MODEL=crash-me \
#     sentierd --job_command=testing/sentierd_fault_job.sh --registry=REG --output=OUT ...
#
# The daemon runs it with sentierd's hidden job flags (--job --job_model=NAME ...):
#   FAULT_JOB_CRASH_MODEL=NAME  the job of model NAME dies of SIGABRT (as a crashing job would)
#   FAULT_JOB_HANG_MODEL=NAME   the job of model NAME sleeps until killed (--job_timeout_s)
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
exec "${FAULT_JOB_SENTIERD:?FAULT_JOB_SENTIERD must name the real sentierd}" "$@"
