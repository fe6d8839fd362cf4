#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# nccl_hash - the real-library NCCL tests of nccl.sh (nccl_counts,
# nccl_slot_wrap, nccl_slot_switch, nccl_deep_args) again, with the agent
# forced onto the fallback of kernels that refuse task storage to uprobe
# programs (before 5.12): the probes' per-thread state in a hash by tid
# (bpf/nccl.bpf.c, nccl_task; INFERTRACE_NO_TASK_STORAGE, agent/sources/loader.c).
# Same counts, same records; each name ends in _hash.
INFERTRACE_NO_TASK_STORAGE=1 NCCL_TEST_SUFFIX=_hash exec bash "$(dirname "$0")/nccl.sh"
