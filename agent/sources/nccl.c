// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nccl.c - attach the NCCL programs (bpf/nccl.bpf.c) to a libnccl file.
 *
 * As for libcudart (uprobes.c): one attachment per file and pid -1, found by
 * discovery.c in /proc/PID/maps and opened through /proc/PID/root (a
 * container's own copy), also when the process dlopen()s NCCL later (the
 * mmap of a libncc* file is reported by proc.bpf.c). Probes attach in every
 * mode: in sentinel mode NCCL collectives are sync points (issue 20) and the
 * cross-rank wait needs each arrival. The entry points are one list,
 * nccl_probe[] below, for whoever merges the sentinel attach policy.
 * Symbols are checked in the ELF first: NCCL before 2.28 lacks ncclAlltoAll,
 * which is then said once and skipped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/libbpf.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "elfscan.h"
#include "nccl_live.h"

/* NCCL probes: attached in sentinel and deep mode alike (see above) */
static const struct {
	enum nccl_api api;
	bool ret;      /* also a return probe: on_nccl_comm_return */
	bool optional; /* absent from older NCCL: no warning */
} nccl_probe[] = {
    {NCCL_ALL_REDUCE, false, false},
    {NCCL_ALL_GATHER, false, false},
    {NCCL_REDUCE_SCATTER, false, false},
    {NCCL_BROADCAST, false, false},
    /*
     * not ncclBcast: NCCL 2.28 implements it as a call of ncclBroadcast
     * (buff, buff, ...), which its probe sees; both would count it twice
     */
    {NCCL_REDUCE, false, false},
    {NCCL_ALLTOALL, false, true},
    {NCCL_SEND, false, false},
    {NCCL_RECV, false, false},
    {NCCL_GROUP_START, false, false},
    {NCCL_GROUP_END, false, false},
    {NCCL_COMM_INIT_RANK, true, false},
    {NCCL_COMM_INIT_RANK_CONFIG, true, true},
    {NCCL_COMM_INIT_RANK_SCALABLE, true, true},
    {NCCL_COMM_INIT_ALL, true, false},
    {NCCL_COMM_SPLIT, true, true},
    {NCCL_COMM_DESTROY, false, false},
    {NCCL_COMM_ABORT, false, true},
};
#define N_NCCL_PROBES (sizeof(nccl_probe) / sizeof(nccl_probe[0]))

static void note_sym(void *ctx, const char *name)
{
	bool *found = ctx;

	for (unsigned i = 0; i < N_NCCL_PROBES; i++) {
		const char *want = nccl_api_name(nccl_probe[i].api);
		size_t n = strlen(want);

		if (!strncmp(name, want, n) && (name[n] == '\0' || name[n] == '@'))
			found[i] = true;
	}
}

int nccl_attach_file(struct agent *a, int idx)
{
	struct libfile *lf = &a->libs[idx];
	bool found[N_NCCL_PROBES] = {};
	char missing[256] = "", buf[32];
	const char *path = uprobes_file_path(lf, buf, sizeof(buf));
	int err, n = 0;

	err = elf_scan_funcs(path, note_sym, found);
	if (err == -ENOEXEC)
		err = -EINVAL;
	if (err) {
		pr_err("%s: cannot read ELF symbols: %s", lf->display, strerror(-err));
		return err;
	}
	lf->links = calloc(2 * N_NCCL_PROBES, sizeof(*lf->links));
	if (!lf->links)
		return -ENOMEM;
	lf->missing = 0;
	for (unsigned i = 0; i < N_NCCL_PROBES; i++) {
		const char *sym = nccl_api_name(nccl_probe[i].api);
		struct bpf_program *prog;
		struct bpf_link *l;

		if (!found[i]) {
			lf->missing++;
			if (!nccl_probe[i].optional &&
			    strlen(missing) + strlen(sym) + 2 < sizeof(missing))
				strcat(strcat(missing, " "), sym);
			continue;
		}
		prog = loader_program(a, sym);
		if (!prog) {
			pr_err("BPF object lacks program %s (build mismatch)", sym);
			err = -ENOENT;
			goto fail;
		}
		for (int r = 0; r < 1 + nccl_probe[i].ret; r++) {
			/* once its process is gone, by descriptor (uprobes_attach_probe) */
			l = uprobes_attach_probe(lf, r ? loader_nccl_comm_return(a) : prog, sym, r);
			if (!l) {
				err = -errno;
				pr_err("%s: attach %s %s: %s", lf->display,
				       r ? "uretprobe" : "uprobe", sym, strerror(-err));
				a->cnt.attach_errors++;
				goto fail;
			}
			lf->links[n++] = l;
		}
	}
	lf->n_links = n;
	if (!n) {
		pr_err(
		    "%s: none of the NCCL entry points is defined in this file; it is not traced",
		    lf->display);
		err = -ENOENT;
		goto fail;
	}
	if (missing[0])
		pr_warn("%s: symbols not found, those entry points are not traced here:%s",
			lf->display, missing);
	pr_info("attached %d NCCL probes to %s", n, lf->display);
	return 0;

fail:
	lf->n_links = n;
	uprobes_detach_file(a, idx);
	return err;
}
