// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * uprobes.c - attach the CUDA launch-path programs (bpf/cuda.bpf.c) to a
 * library file.
 *
 * Uprobes are keyed by inode and offset, so one attachment per file (pid -1)
 * covers every process that maps it, in any container; the BPF side filters
 * by traced_procs. Each container may ship its own libcudart: every distinct
 * file gets its own attachment (discovery.c tracks users per file).
 * Symbols are checked in the file's ELF symbol tables first, so a library
 * that lacks an entry point gets one clear line instead of libbpf noise.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "elfscan.h"

static bool api_is_sync(unsigned api)
{
	return api == API_CUDA_STREAM_SYNCHRONIZE || api == API_CUDA_STREAM_SYNCHRONIZE_PTSZ ||
	       api == API_CUDA_DEVICE_SYNCHRONIZE;
}

/* elf_scan_funcs(): which of the CUDA entry points the file defines */
static void note_api(void *ctx, const char *name)
{
	bool *found = ctx;

	for (unsigned api = 0; api < API_COUNT; api++) {
		size_t n = strlen(corr_api_name(api));

		/* versioned names in .symtab look like sym@@VER */
		if (!strncmp(name, corr_api_name(api), n) && (name[n] == '\0' || name[n] == '@'))
			found[api] = true;
	}
}

struct bpf_link *uprobes_attach_sym(struct bpf_program *prog, const char *path, const char *sym,
				    bool ret)
{
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = sym, .retprobe = ret);

	return bpf_program__attach_uprobe_opts(prog, -1, path, 0, &opts);
}

int uprobes_attach_file(struct agent *a, int idx)
{
	struct libfile *lf = &a->libs[idx];
	bool found[API_COUNT] = {};
	char missing[512] = "";
	int err, n = 0;

	err = elf_scan_funcs(lf->path, note_api, found);
	if (err == -ENOEXEC)
		err = -EINVAL; /* as libelf says: not an ELF file */
	if (err) {
		pr_err("%s: cannot read ELF symbols: %s", lf->display, strerror(-err));
		return err;
	}
	lf->links = calloc(2 * API_COUNT, sizeof(*lf->links));
	if (!lf->links)
		return -ENOMEM;
	lf->missing = 0;

	for (unsigned api = 0; api < API_COUNT; api++) {
		struct bpf_program *prog;
		struct bpf_link *l;

		if (corr_api_is_driver(api) != lf->is_driver)
			continue;
		if (!found[api]) {
			lf->missing++;
			if (strlen(missing) + strlen(corr_api_name(api)) + 2 < sizeof(missing))
				strcat(strcat(missing, " "), corr_api_name(api));
			continue;
		}
		prog = loader_program(a, corr_api_name(api));
		if (!prog) {
			pr_err("BPF object lacks program %s (build mismatch)", corr_api_name(api));
			err = -ENOENT;
			goto fail;
		}
		l = uprobes_attach_sym(prog, lf->path, corr_api_name(api), false);
		if (!l) {
			err = -errno;
			pr_err("%s: attach uprobe %s: %s", lf->display, corr_api_name(api),
			       strerror(-err));
			a->cnt.attach_errors++;
			goto fail;
		}
		lf->links[n++] = l;
		if (api_is_sync(api)) {
			l = uprobes_attach_sym(loader_sync_return(a), lf->path, corr_api_name(api),
					       true);
			if (!l) {
				err = -errno;
				pr_err("%s: attach uretprobe %s: %s", lf->display,
				       corr_api_name(api), strerror(-err));
				a->cnt.attach_errors++;
				goto fail;
			}
			lf->links[n++] = l;
		}
	}
	lf->n_links = n;
	if (!n) {
		pr_err("%s: none of the CUDA %s entry points is defined in this file; it is not "
		       "traced",
		       lf->display, lf->is_driver ? "driver" : "runtime");
		err = -ENOENT;
		goto fail;
	}
	if (lf->missing)
		pr_warn("%s: symbols not found, those entry points are not traced here:%s",
			lf->display, missing);
	pr_info("attached %d probes to %s", n, lf->display);
	return 0;

fail:
	lf->n_links = n;
	uprobes_detach_file(a, idx);
	return err;
}

/*
 * Detaching a uprobe waits in the kernel (uprobe_unregister synchronises
 * RCU): 0.1-0.2 s per link on a VM, seconds for a library's 20 links. The
 * event loop must not stall that long, so links (the CUDA libraries' here,
 * usdt.c's step probes) are handed to a reaper thread that destroys them;
 * the loop only queues. uprobes_reaper_stop()
 * waits for the queue to empty at shutdown.
 */
struct reap {
	struct bpf_link **links;
	int n;
	struct reap *next;
};

static pthread_mutex_t reap_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reap_cv = PTHREAD_COND_INITIALIZER;
static struct reap *reap_head;
static bool reap_started, reap_stop;
static pthread_t reaper;

static void destroy_links(struct bpf_link **links, int n)
{
	for (int i = 0; i < n; i++)
		bpf_link__destroy(links[i]);
	free(links);
}

static void *reaper_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&reap_mu);
	for (;;) {
		struct reap *r = reap_head;

		if (!r) {
			if (reap_stop)
				break;
			pthread_cond_wait(&reap_cv, &reap_mu);
			continue;
		}
		reap_head = r->next;
		pthread_mutex_unlock(&reap_mu);
		destroy_links(r->links, r->n);
		free(r);
		pthread_mutex_lock(&reap_mu);
	}
	pthread_mutex_unlock(&reap_mu);
	return NULL;
}

void uprobes_reap_links(struct bpf_link **links, int n)
{
	struct reap *r = calloc(1, sizeof(*r)), **tail;

	pthread_mutex_lock(&reap_mu);
	if (!reap_started && r && !reap_stop)
		reap_started = !pthread_create(&reaper, NULL, reaper_main, NULL);
	if (!reap_started || !r) {
		/* no thread or no memory: destroy here, slow but correct */
		pthread_mutex_unlock(&reap_mu);
		free(r);
		destroy_links(links, n);
		return;
	}
	r->links = links;
	r->n = n;
	for (tail = &reap_head; *tail; tail = &(*tail)->next)
		;
	*tail = r;
	pthread_cond_signal(&reap_cv);
	pthread_mutex_unlock(&reap_mu);
}

void uprobes_reaper_stop(void)
{
	pthread_mutex_lock(&reap_mu);
	reap_stop = true;
	pthread_cond_signal(&reap_cv);
	pthread_mutex_unlock(&reap_mu);
	if (reap_started)
		pthread_join(reaper, NULL);
	reap_started = false;
}

void uprobes_detach_file(struct agent *a, int idx)
{
	struct libfile *lf = &a->libs[idx];

	if (lf->links)
		uprobes_reap_links(lf->links, lf->n_links);
	lf->links = NULL;
	lf->n_links = 0;
}
