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
	       api == API_CUDA_DEVICE_SYNCHRONIZE || api == API_CUDA_EVENT_SYNCHRONIZE ||
	       api == API_CUDA_MEMCPY || api == API_CU_STREAM_SYNCHRONIZE ||
	       api == API_CU_CTX_SYNCHRONIZE || api == API_CU_EVENT_SYNCHRONIZE ||
	       (API_CODE_LOAD & API_BIT(api));
}

/*
 * The attach table's class of an entry point (bpf/events.h, API_GRAPH_CLASS
 * and API_LAUNCH_CLASS): sync-class probes are attached with the file, the
 * others only while uprobes_launch_policy() wants them. A probe added later
 * (NCCL collectives, issue 21) is of the sync class unless its bit is put
 * in one of those masks.
 */
enum probe_class uprobes_api_class(unsigned api)
{
	if (api >= 32)
		return PROBE_SYNC;
	if (API_LAUNCH_CLASS & API_BIT(api))
		return PROBE_LAUNCH;
	if (API_GRAPH_CLASS & API_BIT(api))
		return PROBE_GRAPH;
	return PROBE_SYNC;
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

static struct bpf_link *attach_sym(struct bpf_program *prog, const char *path, const char *sym,
				   bool ret)
{
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = sym, .retprobe = ret);

	return bpf_program__attach_uprobe_opts(prog, -1, path, 0, &opts);
}

/*
 * On-demand (graph and launch class) links of each file, indexed like
 * a->libs, kept apart from lf->links so they can come and go while the file
 * stays traced; and what the file defines (its ELF scan, done once).
 */
static struct launch_set {
	struct bpf_link *links[API_COUNT]; /* by api; NULL: not attached */
	bool found[API_COUNT];
} launch_sets[MAX_LIBFILES];

/* the on-demand classes' switch: one state for the node (uprobes are per file) */
static struct {
	bool on[PROBE_CLASSES]; /* that class's links are attached on every traced file */
	bool started;		/* uprobes_launch_start() ran */
	uint64_t attaches, detaches, attach_errors;
} lsw;

/*
 * The path to open the file by: lf->path (/proc/PID/root/..., so that the
 * kernel and bpftool name the file) while PID lives, else the descriptor
 * discovery.c keeps. A launch-class attach comes any time later (a
 * deep-dive, a sampling window), after PID may have exited unseen yet; and
 * a short-lived PID may exit during the file's first attach (which failed
 * then, and the file was refused for good: no process mapping it traced).
 */
static const char *fd_path(const struct libfile *lf, char *buf, size_t sz)
{
	snprintf(buf, sz, "/proc/self/fd/%d", lf->fd);
	return buf;
}

const char *uprobes_file_path(const struct libfile *lf, char *buf, size_t sz)
{
	if (lf->fd < 0 || !access(lf->path, F_OK))
		return lf->path;
	return fd_path(lf, buf, sz);
}

/*
 * By uprobes_file_path(); and by the descriptor when the process whose root
 * the path goes through left between that check and the attach (ENOENT: a
 * file kept for --lib-grace is attached to while its users come and go)
 */
struct bpf_link *uprobes_attach_probe(const struct libfile *lf, struct bpf_program *prog,
				      const char *sym, bool ret)
{
	char buf[32];
	const char *path = uprobes_file_path(lf, buf, sizeof(buf));
	struct bpf_link *l = attach_sym(prog, path, sym, ret);

	if (!l && errno == ENOENT && path == lf->path && lf->fd >= 0)
		l = attach_sym(prog, fd_path(lf, buf, sizeof(buf)), sym, ret);
	return l;
}

/* entry (and, for a synchronising call, return) probe of api on the file */
static int attach_api(struct agent *a, struct libfile *lf, unsigned api, struct bpf_link **links,
		      int *n)
{
	struct bpf_program *prog = loader_program(a, corr_api_name(api));
	struct bpf_link *l;

	if (!prog) {
		pr_err("BPF object lacks program %s (build mismatch)", corr_api_name(api));
		return -ENOENT;
	}
	l = uprobes_attach_probe(lf, prog, corr_api_name(api), false);
	if (!l) {
		int err = -errno;

		pr_err("%s: attach uprobe %s: %s", lf->display, corr_api_name(api), strerror(-err));
		a->cnt.attach_errors++;
		return err;
	}
	links[(*n)++] = l;
	if (api_is_sync(api)) {
		l = uprobes_attach_probe(lf, loader_sync_return(a), corr_api_name(api), true);
		if (!l) {
			int err = -errno;

			pr_err("%s: attach uretprobe %s: %s", lf->display, corr_api_name(api),
			       strerror(-err));
			a->cnt.attach_errors++;
			return err;
		}
		links[(*n)++] = l;
	}
	return 0;
}

/* the file's probes of one on-demand class; a failure leaves the others (logged, counted) */
static int class_attach_file(struct agent *a, int idx, enum probe_class cls)
{
	struct libfile *lf = &a->libs[idx];
	struct launch_set *ls = &launch_sets[idx];
	int n = 0;

	for (unsigned api = 0; api < API_COUNT; api++) {
		int one = 0;

		if (uprobes_api_class(api) != cls || !ls->found[api] || ls->links[api] ||
		    corr_api_is_driver(api) != lf->is_driver)
			continue;
		/* on-demand classes have no return probe: one link each */
		if (attach_api(a, lf, api, &ls->links[api], &one))
			lsw.attach_errors++;
		n += one;
	}
	return n;
}

/* the file's probes of one class (or all on-demand ones: PROBE_CLASSES), to the reaper */
static int class_detach_file(int idx, enum probe_class cls)
{
	struct launch_set *ls = &launch_sets[idx];
	struct bpf_link **l = malloc(API_COUNT * sizeof(*l));
	int n = 0;

	for (unsigned api = 0; api < API_COUNT; api++) {
		if (!ls->links[api] || (cls != PROBE_CLASSES && uprobes_api_class(api) != cls))
			continue;
		if (l)
			l[n++] = ls->links[api];
		else
			bpf_link__destroy(ls->links[api]); /* slow, on the loop, but correct */
		ls->links[api] = NULL;
	}
	if (n)
		uprobes_reap_links(l, n);
	else
		free(l);
	return n;
}

static int class_links(int idx)
{
	int n = 0;

	for (unsigned api = 0; api < API_COUNT; api++)
		n += launch_sets[idx].links[api] != NULL;
	return n;
}

int uprobes_attach_file(struct agent *a, int idx)
{
	struct libfile *lf = &a->libs[idx];
	struct launch_set *ls = &launch_sets[idx];
	bool *found = ls->found;
	char missing[512] = "", buf[32];
	int err, n = 0, defined = 0;

	memset(ls, 0, sizeof(*ls));
	err = elf_scan_funcs(uprobes_file_path(lf, buf, sizeof(buf)), note_api, found);
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
		if (corr_api_is_driver(api) != lf->is_driver)
			continue;
		if (!found[api]) {
			lf->missing++;
			if (strlen(missing) + strlen(corr_api_name(api)) + 2 < sizeof(missing))
				strcat(strcat(missing, " "), corr_api_name(api));
			continue;
		}
		defined++;
		if (uprobes_api_class(api) != PROBE_SYNC)
			continue; /* class_attach_file(), when wanted */
		err = attach_api(a, lf, api, lf->links, &n);
		if (err)
			goto fail;
	}
	lf->n_links = n;
	if (!defined) {
		pr_err("%s: none of the CUDA %s entry points is defined in this file; it is not "
		       "traced",
		       lf->display, lf->is_driver ? "driver" : "runtime");
		err = -ENOENT;
		goto fail;
	}
	if (lf->missing)
		pr_warn("%s: symbols not found, those entry points are not traced here:%s",
			lf->display, missing);
	for (int c = PROBE_GRAPH; c < PROBE_CLASSES; c++)
		if (lsw.on[c])
			class_attach_file(a, idx, c);
	pr_info("attached %d probes to %s (%d of them graph or per-launch)", n + class_links(idx),
		lf->display, class_links(idx));
	return 0;

fail:
	lf->n_links = n;
	uprobes_detach_file(a, idx);
	return err;
}

/*
 * Per-launch probes cost a trap (an int3 and an exception return, ~1 us on
 * bare metal, ~6.6 us on this VM) on the launching thread for every kernel
 * launch, whatever the program then does: a link kept but filtered still
 * pays it. So they are attached only while something wants them and really
 * detached after: deep mode, a deep-dive (uprobes are per file, so every
 * process mapping the file traps meanwhile; only the deep-dived ones record),
 * --sentinel-launches all, or a --launch-sampling window.
 */
static bool sampling_window(const struct agent *a, uint64_t now)
{
	const struct agent_opts *o = &a->opts;

	if (!o->launch_sample_period_ns)
		return false;
	return (now - a->start_ns) % o->launch_sample_period_ns < o->launch_sample_window_ns;
}

static const char *const class_names[PROBE_CLASSES] = {"sync", "graph", "launch"};

/* attach or detach one on-demand class on every traced file */
static void class_switch(struct agent *a, enum probe_class cls, bool on, const char *why)
{
	uint64_t t0 = now_ns(), t1;
	int files = 0, links = 0;

	lsw.on[cls] = on;
	on ? lsw.attaches++ : lsw.detaches++;
	for (int i = 0; i < MAX_LIBFILES; i++) {
		int n;

		/*
		 * a file kept without a user (--lib-grace) follows the switch
		 * too: it keeps every link it has until its grace is over. Its
		 * on-demand links were once dropped at its last user's exit and
		 * attached again at the next one's start; a link's destroy takes
		 * 0.1-0.35 s, and while it waited the new link fired beside it:
		 * every launch of the new process was recorded twice.
		 */
		if (!a->libs[i].used || !a->libs[i].links)
			continue;
		n = on ? class_attach_file(a, i, cls) : class_detach_file(i, cls);
		links += n;
		files += n > 0;
	}
	t1 = now_ns();
	pr_debug("%s probes %s (%s): %d links on %d files in %.2f ms", class_names[cls],
		 on ? "attached" : "queued for detach", why, links, files, (t1 - t0) / 1e6);
	json_t *r = rec_new(a, "launch_probes", 0, 0, t1);

	if (!r)
		return;
	json_object_set_new(r, "class", json_string(class_names[cls]));
	json_object_set_new(r, "action", json_string(on ? "attach" : "detach"));
	json_object_set_new(r, "reason", json_string(why));
	json_object_set_new(r, "files", json_integer(files));
	json_object_set_new(r, "links", json_integer(links));
	json_object_set_new(r, "took_ns", json_integer((json_int_t)(t1 - t0)));
	json_object_set_new(r, "attach_errors", json_integer((json_int_t)lsw.attach_errors));
	rec_send_obj(a, REC_STATS, r);
}

void uprobes_launch_policy(struct agent *a)
{
	const struct agent_opts *o = &a->opts;
	bool sample = sampling_window(a, now_ns());
	bool dive = deepdive_proc_count(a) > 0, deep = o->mode == MODE_DEEP;
	bool all = o->sentinel_launches == SENTINEL_LAUNCHES_ALL;
	bool graphs = o->sentinel_launches == SENTINEL_LAUNCHES_GRAPHS;
	bool want[PROBE_CLASSES] = {
	    [PROBE_GRAPH] = deep || all || graphs || sample || dive,
	    [PROBE_LAUNCH] = deep || all || sample || dive,
	};
	const char *why = deep	   ? "deep"
			  : all	   ? "all"
			  : dive   ? "deep-dive"
			  : sample ? "sampling"
				   : "graphs";
	uint32_t record = 0;

	if (!lsw.started)
		return;
	/* records start after the attach and stop before the detach */
	for (int c = PROBE_GRAPH; c < PROBE_CLASSES; c++)
		if (want[c] && !lsw.on[c])
			class_switch(a, c, true,
				     c == PROBE_GRAPH && graphs && !all ? "graphs" : why);
	if (all || sample)
		record = API_GRAPH_CLASS | API_LAUNCH_CLASS;
	else if (graphs)
		record = API_GRAPH_CLASS;
	if (record != a->sentinel_launches) {
		a->sentinel_launches = record;
		if (a->cap.runtime_cfg)
			a->cap.runtime_cfg(a);
	}
	for (int c = PROBE_GRAPH; c < PROBE_CLASSES; c++)
		if (!want[c] && lsw.on[c])
			class_switch(a, c, false, "idle");
}

void uprobes_launch_start(struct agent *a)
{
	lsw.started = true;
	a->cap.launch_probes = uprobes_launch_policy;
	uprobes_launch_policy(a);
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

/*
 * Each destroy waits for its own grace period, but grace periods are shared
 * by whoever waits at the same time: REAP_THREADS threads destroy at once.
 * One at a time, a stop with 16 files kept for --lib-grace (about 500
 * links) took minutes, at 0.2-0.35 s per link on this VM under load.
 */
#define REAP_THREADS 16

struct reap_stripe {
	struct bpf_link **links;
	int n, first, step;
};

static void *reap_stripe_main(void *arg)
{
	const struct reap_stripe *s = arg;

	for (int i = s->first; i < s->n; i += s->step)
		bpf_link__destroy(s->links[i]);
	return NULL;
}

static void destroy_links(struct bpf_link **links, int n)
{
	struct reap_stripe s[REAP_THREADS];
	pthread_t t[REAP_THREADS];
	bool started[REAP_THREADS] = {};
	int k = n < REAP_THREADS ? n : REAP_THREADS;

	for (int i = 1; i < k; i++) {
		s[i] = (struct reap_stripe){.links = links, .n = n, .first = i, .step = k};
		started[i] = !pthread_create(&t[i], NULL, reap_stripe_main, &s[i]);
	}
	/* stripe 0 here, and the stripes of threads that did not start */
	for (int i = 0; i < n; i++)
		if (i % k == 0 || !started[i % k])
			bpf_link__destroy(links[i]);
	for (int i = 1; i < k; i++)
		if (started[i])
			pthread_join(t[i], NULL);
	free(links);
}

/* the whole queue as one array of links (NULL, the queue kept, when out of memory) */
static struct bpf_link **take_all(struct reap **head, int *n)
{
	struct bpf_link **all;
	struct reap *r, *next;
	int total = 0;

	for (r = *head; r; r = r->next)
		total += r->n;
	all = malloc((size_t)(total ? total : 1) * sizeof(*all));
	if (!all)
		return NULL;
	for (r = *head, *n = 0; r; r = next) {
		next = r->next;
		memcpy(all + *n, r->links, (size_t)r->n * sizeof(*all));
		*n += r->n;
		free(r->links);
		free(r);
	}
	*head = NULL;
	return all;
}

static void *reaper_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&reap_mu);
	for (;;) {
		struct reap *r = reap_head;
		struct bpf_link **all;
		int n = 0;

		if (!r) {
			if (reap_stop)
				break;
			pthread_cond_wait(&reap_cv, &reap_mu);
			continue;
		}
		/* everything queued at once: one wave of grace periods for all */
		all = take_all(&reap_head, &n);
		if (!all) {
			reap_head = r->next;
			all = r->links;
			n = r->n;
			free(r);
		}
		pthread_mutex_unlock(&reap_mu);
		destroy_links(all, n);
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

	class_detach_file(idx, PROBE_CLASSES);
	if (lf->links)
		uprobes_reap_links(lf->links, lf->n_links);
	lf->links = NULL;
	lf->n_links = 0;
	if (lf->fd >= 0)
		close(lf->fd);
	lf->fd = -1;
}
