// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * discovery.c - which processes are traced, and which library files carry
 * probes.
 *
 * At start the agent scans /proc for processes that map libcudart or libcuda
 * (or takes the --pid set). Afterwards bpf/proc.bpf.c reports every
 * executable mapping of a libcud* file (a process that just loaded CUDA),
 * every executable mapping a traced process makes (a library it dlopen()s,
 * which may hold the step probes: usdt.c), and exec/exit of traced
 * processes. Libraries are opened through /proc/PID/root so that a
 * container's own copy is the file probed; files are told apart by (device,
 * inode), attached once, and detached when their last traced user exits.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include "jsonw.h"
#include "state.h"
#include "pipeline.h"
#include "sources.h"

#define MAPS_RETRIES 20 /* ticks to wait for a reported mapping to appear */
/*
 * Library files kept attached without a traced user (--lib-grace) at once:
 * each holds its sync-class links (a perf event per probe, 6-12) and its
 * inode, and a stop detaches them all (0.1-0.3 s per link on a loaded VM).
 */
#define LIB_IDLE_MAX 8
#define LIB_IDLE_MAX_S "8" /* in the log line */

int cuda_lib_kind(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	if (!strncmp(base, "libcudart.so", 12) || !strncmp(base, "libcudart-", 10))
		return 1;
	if (!strncmp(base, "libcuda.so", 10))
		return 2;
	if (!strncmp(base, "libnccl.so", 10))
		return 3;
	return 0;
}

int maps_parse_line(const char *line, unsigned long *dev_major, unsigned long *dev_minor,
		    unsigned long *ino, char *path, size_t path_sz, bool *exec)
{
	unsigned long start, end, off;
	char perms[8];
	int pos = 0;

	if (sscanf(line, "%lx-%lx %7s %lx %lx:%lx %lu %n", &start, &end, perms, &off, dev_major,
		   dev_minor, ino, &pos) < 7)
		return -EINVAL;
	*exec = strchr(perms, 'x') != NULL;
	while (line[pos] == ' ')
		pos++;
	snprintf(path, path_sz, "%s", line + pos);
	path[strcspn(path, "\n")] = '\0';
	return 0;
}

/* the non-empty value of KEY in a NUL-separated environment, or NULL */
static const char *environ_get(const char *env, size_t len, const char *key, size_t *vlen)
{
	size_t i = 0, kl = strlen(key);

	while (i < len) {
		const char *s = env + i;
		size_t n = strnlen(s, len - i);

		if (n > kl + 1 && !strncmp(s, key, kl) && s[kl] == '=') {
			*vlen = n - kl - 1;
			return s + kl + 1;
		}
		i += n + 1;
	}
	return NULL;
}

const char *instance_from_environ(const char *env, size_t len, char *out, size_t out_sz)
{
	size_t n, m;
	const char *v = environ_get(env, len, "INFERTRACE_INSTANCE", &n), *c;
	char tmp[256];

	if (!v || !out_sz)
		return NULL;
	/*
	 * Kept as records and status show it, so that agentctl can ask for it
	 * by that name: cut at a character boundary, invalid UTF-8 as U+FFFD
	 * (counted in utf8_replaced), as jw_utf8_clean() keeps names in tables.
	 */
	if (out_sz > sizeof(tmp))
		out_sz = sizeof(tmp);
	m = n < out_sz - 1 ? n : out_sz - 1;
	while (m < n && m && ((unsigned char)v[m] & 0xc0) == 0x80)
		m--; /* v[m] continues a character: cut before it starts */
	snprintf(out, out_sz, "%.*s", (int)m, v);
	c = jw_utf8_clean(out, tmp, out_sz);
	if (c != out)
		memcpy(out, c, strlen(c) + 1);
	return out;
}

/*
 * The process's rank among the workers of its instance: INFERTRACE_RANK,
 * else LOCAL_RANK (torchrun, DeepSpeed, Accelerate: the worker's GPU on the
 * node), else RANK. -1 when none holds a number in 0..65535; a malformed
 * INFERTRACE_RANK hides the others (-2, so that the caller can say so).
 */
int rank_from_environ(const char *env, size_t len)
{
	static const char *const keys[] = {"INFERTRACE_RANK", "LOCAL_RANK", "RANK"};

	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		size_t n;
		const char *v = environ_get(env, len, keys[k], &n);
		long r = 0;

		if (!v)
			continue;
		for (size_t i = 0; i < n; i++) {
			if (v[i] < '0' || v[i] > '9' || r > 65535) {
				r = -1;
				break;
			}
			r = r * 10 + (v[i] - '0');
		}
		if (r >= 0 && r <= 65535)
			return (int)r;
		if (k == 0)
			return -2;
	}
	return -1;
}

static bool pid_allowed(struct agent *a, uint32_t pid)
{
	if (!a->opts.n_pids)
		return true;
	for (int i = 0; i < a->opts.n_pids; i++)
		if ((uint32_t)a->opts.pids[i] == pid)
			return true;
	return false;
}

uint64_t stat_start_time(const char *stat)
{
	/* comm may hold spaces and ')': fields restart after the last ')' */
	const char *p = strrchr(stat, ')');

	/*
	 * field 22 is starttime; after ')' come fields 3..: the n-th space
	 * after ')' starts field n + 2. (This stopped at field 21,
	 * itrealvalue, always 0: every start time read 0, so neither a
	 * reused pid nor a lost exit was ever noticed; issue 18, finding 18.)
	 */
	for (int field = 3; field <= 22 && p; field++)
		p = strchr(p + 1, ' ');
	return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* 0: the process is gone (or its stat unreadable) */
static uint64_t proc_start_time(uint32_t pid)
{
	char path[64], buf[1024];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return stat_start_time(buf);
}

static void read_comm(uint32_t pid, char *comm, size_t sz)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%u/comm", pid);
	comm[0] = '\0';
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, comm, sz - 1);
	close(fd);
	if (n < 0)
		n = 0;
	comm[n] = '\0';
	comm[strcspn(comm, "\n")] = '\0';
}

static void read_instance(struct agent *a, struct proc *p)
{
	char path[64], *env = NULL;
	size_t cap = 0, len = 0;
	ssize_t n;
	int fd;

	snprintf(p->instance, sizeof(p->instance), "%.100s/%.16s", a->host, p->comm);
	p->rank = -1;
	snprintf(path, sizeof(path), "/proc/%u/environ", p->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	for (;;) {
		if (len == cap) {
			char *ne;

			if (cap >= (1 << 20))
				break; /* absurd environment: keep the default */
			cap = cap ? cap * 2 : 8192;
			ne = realloc(env, cap);
			if (!ne)
				break;
			env = ne;
		}
		n = read(fd, env + len, cap - len);
		if (n <= 0)
			break;
		len += n;
	}
	close(fd);
	if (env) {
		instance_from_environ(env, len, p->instance, sizeof(p->instance));
		p->rank = rank_from_environ(env, len);
		if (p->rank == -2) {
			pr_warn("pid %u: INFERTRACE_RANK is not a number in 0..65535: rank unknown",
				p->pid);
			p->rank = -1;
		}
	}
	free(env);
}

static void emit_proc_record(struct agent *a, struct proc *p, const char *what)
{
	json_t *r = rec_new(a, "process", p->pid, 0, now_ns());
	json_t *libs = json_array();

	for (int i = 0; i < p->n_libs; i++)
		json_array_append_new(libs, rec_string(a->libs[p->libs[i]].display));
	json_object_set_new(r, "event", json_string(what));
	json_object_set_new(r, "comm", rec_string(p->comm));
	json_object_set_new(r, "libraries", libs);
	rec_emit(a, REC_SUMMARY, r);
}

/* find or attach the library file (dev, ino); returns its index or -errno */
static int lib_get(struct agent *a, uint32_t pid, const char *path, int kind)
{
	char full[600];
	struct stat st;
	int free_slot = -1, err;

	snprintf(full, sizeof(full), "/proc/%u/root%s", pid, path);
	if (stat(full, &st))
		return -errno;
	for (int i = 0; i < MAX_LIBFILES; i++) {
		struct libfile *lf = &a->libs[i];

		if (!lf->used) {
			if (free_slot < 0)
				free_slot = i;
			continue;
		}
		if (lf->dev == st.st_dev && lf->ino == st.st_ino)
			return lf->rejected ? -ENOENT : i;
	}
	if (free_slot < 0) {
		pr_warn("more than %d distinct CUDA library files: %s not traced", MAX_LIBFILES,
			path);
		return -ENOSPC;
	}
	struct libfile *lf = &a->libs[free_slot];

	memset(lf, 0, sizeof(*lf));
	lf->dev = st.st_dev;
	lf->ino = st.st_ino;
	lf->is_driver = kind == 2;
	lf->is_nccl = kind == 3;
	snprintf(lf->path, sizeof(lf->path), "%s", full);
	lf->path_pid = pid;
	/* held while attached: later attaches open it by descriptor once PID is gone */
	lf->fd = open(full, O_RDONLY | O_CLOEXEC);
	snprintf(lf->display, sizeof(lf->display), "%s", path);
	lf->used = true;
	err = lf->is_nccl ? nccl_attach_file(a, free_slot) : uprobes_attach_file(a, free_slot);
	if (err) {
		/* keep the slot as a tombstone: the error was said once */
		lf->rejected = true;
		return err;
	}
	return free_slot;
}

static void lib_detach(struct agent *a, int idx, const char *why)
{
	struct libfile *lf = &a->libs[idx];

	if (lf->idle_since_ns) {
		lf->idle_since_ns = 0;
		a->cnt.files_idle--;
		a->cnt.files_idle_detached++;
	}
	pr_info("detached %s (%s)", lf->display, why);
	uprobes_detach_file(a, idx);
	lf->used = false;
}

/*
 * A traced process maps the file: it is in use again. One that was kept
 * attached without a user (lib_put) costs nothing more: attaching a file
 * (an ELF scan, a perf event per probe, the breakpoints written into every
 * process mapping it) cost about 5 ms of agent CPU per short-lived process.
 */
static void lib_use(struct agent *a, int idx, uint32_t pid, const char *path)
{
	struct libfile *lf = &a->libs[idx];

	lf->users++;
	if (!lf->idle_since_ns)
		return;
	lf->idle_since_ns = 0;
	a->cnt.files_idle--;
	a->cnt.files_reused++;
	/* later attaches (launch classes) open it through a live process's root */
	snprintf(lf->path, sizeof(lf->path), "/proc/%u/root%s", pid, path);
	lf->path_pid = pid;
	pr_debug("%s: mapped again within --lib-grace, probes still attached", lf->display);
}

/*
 * The process whose root the file is opened through (lf->path) is gone but
 * others map the file: open it through one of theirs, or a later attach (a
 * deep-dive's, a sampling window's) fails with ENOENT. Each candidate is
 * checked to reach the same file (a container may map it elsewhere).
 */
static void lib_repath(struct agent *a, int idx, uint32_t gone)
{
	struct libfile *lf = &a->libs[idx];
	char full[sizeof(lf->path)];
	struct stat st;

	for (int i = 0; i < a->n_procs; i++) {
		struct proc *p = &a->procs[i];
		bool maps = false;

		if (!p->used || p->start_time == PROC_GONE || p->pid == gone)
			continue;
		for (int j = 0; j < p->n_libs; j++)
			maps |= p->libs[j] == idx;
		if (!maps)
			continue;
		snprintf(full, sizeof(full), "/proc/%u/root%s", p->pid, lf->display);
		if (stat(full, &st) || st.st_dev != lf->dev || st.st_ino != lf->ino)
			continue;
		memcpy(lf->path, full, sizeof(full));
		lf->path_pid = p->pid;
		return;
	}
}

/*
 * The file's last traced user is gone. Short-lived CUDA processes come one
 * after another and map the same files, so the probes stay for --lib-grace
 * (discovery_tick() detaches them then), at most LIB_IDLE_MAX files at once
 * (the longest idle goes first). Every probe stays, the per-launch ones too
 * while they are on (uprobes.c, class_switch()): dropped and attached again
 * they fired twice while the old link's destroy waited. Meanwhile a process
 * mapping the file that is not traced (outside --pid) pays the probes'
 * traps as it did before, recording nothing.
 */
static void lib_put(struct agent *a, int idx, uint32_t pid)
{
	struct libfile *lf = &a->libs[idx];
	int oldest = -1;

	if (lf->users > 0 && --lf->users > 0) {
		if (lf->path_pid == pid)
			lib_repath(a, idx, pid);
		return;
	}
	if (lf->idle_since_ns)
		return; /* kept already */
	if (a->opts.lib_grace_s <= 0) {
		lib_detach(a, idx, "no traced process maps it");
		return;
	}
	if (a->cnt.files_idle >= LIB_IDLE_MAX) {
		for (int i = 0; i < MAX_LIBFILES; i++)
			if (a->libs[i].used && a->libs[i].idle_since_ns &&
			    (oldest < 0 ||
			     a->libs[i].idle_since_ns < a->libs[oldest].idle_since_ns))
				oldest = i;
		if (oldest >= 0)
			lib_detach(a, oldest,
				   "more than " LIB_IDLE_MAX_S " files kept without a traced user");
	}
	lf->idle_since_ns = now_ns() | 1; /* never 0: 0 means in use */
	a->cnt.files_idle++;
	pr_debug("%s: no traced process maps it; probes kept for %g s", lf->display,
		 a->opts.lib_grace_s);
}

/* files kept without a user whose --lib-grace is over */
static void lib_expire(struct agent *a, uint64_t now)
{
	uint64_t grace = (uint64_t)(a->opts.lib_grace_s * 1e9);
	char why[96];

	for (int i = 0; i < MAX_LIBFILES && a->cnt.files_idle; i++) {
		struct libfile *lf = &a->libs[i];

		if (!lf->used || !lf->idle_since_ns || now - lf->idle_since_ns < grace)
			continue;
		snprintf(why, sizeof(why), "no traced process mapped it for %g s",
			 a->opts.lib_grace_s);
		lib_detach(a, i, why);
	}
}

/*
 * Read /proc/PID/maps and attach every CUDA library the process maps that
 * it did not map before, and the step probes of every executable file that
 * has them (usdt.c). Returns the number of CUDA libraries mapped, or -errno
 * when maps cannot be read; p->n_exec_maps gets the number of executable
 * file mappings.
 */
static int proc_scan_libs(struct agent *a, struct proc *p)
{
	char path[64], line[1024], lpath[512], exe[512];
	int count = 0, n_exec = 0;
	ssize_t n;
	FILE *f;

	/* the process's own executable, as maps names it (python.c looks in it too) */
	snprintf(path, sizeof(path), "/proc/%u/exe", p->pid);
	n = readlink(path, exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	snprintf(path, sizeof(path), "/proc/%u/maps", p->pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long maj, min, ino;
		bool exec, have = false;
		int kind, idx;

		if (maps_parse_line(line, &maj, &min, &ino, lpath, sizeof(lpath), &exec) || !exec ||
		    !ino)
			continue;
		n_exec++;
		if (lpath[0] == '/') {
			usdt_on_mapping(a, p, makedev(maj, min), ino, lpath);
			python_on_mapping(a, p, makedev(maj, min), ino, lpath, !strcmp(lpath, exe));
		}
		kind = cuda_lib_kind(lpath);
		if (!kind)
			continue;
		count++;
		idx = lib_get(a, p->pid, lpath, kind);
		if (idx < 0)
			continue;
		for (int i = 0; i < p->n_libs; i++)
			if (p->libs[i] == idx)
				have = true;
		if (have || p->n_libs >= MAX_PROC_LIBS) {
			if (!a->libs[idx].users)
				lib_put(a, idx, p->pid); /* attached for nobody */
			continue;
		}
		p->libs[p->n_libs++] = idx;
		lib_use(a, idx, p->pid, lpath);
	}
	fclose(f);
	p->n_exec_maps = n_exec;
	return count;
}

/* does the process map a CUDA library at all (cheap pre-check for the scan) */
static bool maps_cuda(uint32_t pid)
{
	char path[64], line[1024];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%u/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char *slash = strchr(line, '/');

		if (slash && (strstr(slash, "libcud") || strstr(slash, "libnccl")) &&
		    cuda_lib_kind(slash))
			found = true;
	}
	fclose(f);
	return found;
}

static struct proc *proc_add(struct agent *a, uint32_t pid)
{
	struct proc *p = NULL;
	int err;

	for (int i = 0; i < a->n_procs; i++)
		if (!a->procs[i].used) {
			p = &a->procs[i];
			break;
		}
	if (!p) {
		if (a->n_procs >= MAX_PROCS) {
			a->cnt.proc_table_full++;
			pr_warn("more than %d traced processes: pid %u not traced", MAX_PROCS, pid);
			return NULL;
		}
		p = &a->procs[a->n_procs++];
	}
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	p->start_time = proc_start_time(pid);
	/*
	 * Gone already (a short-lived process, exited before its mapping was
	 * read): its exit record will never come, since it was not traced when
	 * it exited, and a start time of 0 would match the 0 that
	 * discovery_tick() reads for a gone process: the slot would never be
	 * freed (issue 18, finding 18).
	 */
	if (!p->start_time) {
		a->cnt.procs_gone_early++;
		return NULL;
	}
	p->used = true;
	proc_index_add(a, p);
	p->instance_id = ++a->next_instance_id;
	read_comm(pid, p->comm, sizeof(p->comm));
	read_instance(a, p);
	err = loader_proc_add(a, pid, p->instance_id, a->opts.mode == MODE_DEEP ? PROC_F_DEEP : 0);
	if (err) {
		pr_warn("pid %u: cannot add to traced_procs: %s", pid, strerror(-err));
		proc_index_del(a, p);
		p->used = false;
		return NULL;
	}
	a->cnt.procs_seen++;
	return p;
}

static void proc_trace(struct agent *a, uint32_t pid)
{
	struct proc *p = proc_find_live(a, pid);
	int n;

	if (!pid_allowed(a, pid) || pid == (uint32_t)getpid())
		return;
	if (p) {
		int before = p->n_libs;

		n = proc_scan_libs(a, p);
		if (n < 0 || p->n_libs == before)
			p->maps_pending = true;
		else
			emit_proc_record(a, p, "libraries");
		return;
	}
	p = proc_add(a, pid);
	if (!p)
		return;
	n = proc_scan_libs(a, p);
	if (n < 0) {
		a->cnt.maps_read_errors++;
		pr_debug("pid %u: cannot read maps: %s", pid, strerror(-n));
	}
	if (!p->n_libs)
		p->maps_pending = true;
	pr_info("tracing pid %u (%s), instance %s, %d CUDA libraries", pid, p->comm,
		agent_instance_of(a, pid), p->n_libs);
	emit_proc_record(a, p, "attach");
}

static void proc_release(struct agent *a, struct proc *p, const char *why)
{
	uint32_t pid = p->pid;

	loader_proc_remove(a, pid);
	usdt_detach(p);
	python_detach(a, p);
	emit_proc_record(a, p, why);
	for (int i = 0; i < p->n_libs; i++)
		lib_put(a, p->libs[i], p->pid);
	p->n_libs = 0;
	a->cnt.procs_exited++;
	/*
	 * The slot stays until aggregate.c has reported the process's threads a
	 * last time (it calls discovery_reap via aggregate_interval).
	 */
	p->maps_pending = false;
	p->start_time = PROC_GONE; /* marks "gone" */
	p->gone_ns = now_ns();
}

int discovery_start(struct agent *a)
{
	DIR *d;
	struct dirent *de;

	if (a->opts.n_pids) {
		for (int i = 0; i < a->opts.n_pids; i++) {
			if (kill(a->opts.pids[i], 0) && errno == ESRCH) {
				pr_err("--pid %d: no such process", a->opts.pids[i]);
				return -ESRCH;
			}
		}
		for (int i = 0; i < a->opts.n_pids; i++)
			proc_trace(a, a->opts.pids[i]);
		return 0;
	}
	d = opendir("/proc");
	if (!d) {
		pr_err("cannot read /proc: %s", strerror(errno));
		return -errno;
	}
	while ((de = readdir(d))) {
		char *end;
		unsigned long pid = strtoul(de->d_name, &end, 10);

		if (*end || !pid)
			continue;
		if (maps_cuda(pid))
			proc_trace(a, pid);
	}
	closedir(d);
	if (!a->n_procs)
		pr_info("no CUDA process yet; watching for processes that load libcudart or "
			"libcuda");
	return 0;
}

void discovery_on_lib_map(struct agent *a, uint32_t pid)
{
	struct proc *p = proc_find_live(a, pid);

	if (p) {
		p->maps_pending = true; /* picked up at the next tick, mapping complete */
		return;
	}
	proc_trace(a, pid);
}

void discovery_on_exec(struct agent *a, uint32_t pid)
{
	struct proc *p = proc_find_live(a, pid);

	if (!p)
		return;
	/* the old image's mappings are gone; its new libraries will be reported */
	for (int i = 0; i < p->n_libs; i++)
		lib_put(a, p->libs[i], p->pid);
	p->n_libs = 0;
	usdt_detach(p);
	python_detach(a, p);
	p->n_exec_maps = 0;
	read_comm(pid, p->comm, sizeof(p->comm));
	read_instance(a, p);
	p->maps_pending = true;
	emit_proc_record(a, p, "exec");
}

void discovery_on_exit(struct agent *a, uint32_t pid)
{
	struct proc *p = proc_find_live(a, pid);

	if (p)
		proc_release(a, p, "exit");
}

/*
 * Every turn of the loop: the retries of pending library scans; at most
 * every PROC_CHECK_NS, each process's start time. The loop turns for every
 * shim message and ring wake-up, so checking /proc each turn had cost a
 * busy node's agent 40% of its CPU (perf: 6 workloads with the CUPTI shim,
 * 12 launching threads).
 */
#define PROC_CHECK_NS (100 * 1000000ULL)

void discovery_tick(struct agent *a)
{
	uint64_t now = now_ns();
	bool check = now - a->procs_checked_ns >= PROC_CHECK_NS;

	if (a->cnt.files_idle)
		lib_expire(a, now);
	if (check)
		a->procs_checked_ns = now;
	for (int i = 0; i < a->n_procs; i++) {
		struct proc *p = &a->procs[i];

		if (!p->used || p->start_time == PROC_GONE)
			continue;
		/*
		 * an exit whose record was lost (one between proc_add() and
		 * loader_proc_add() is never reported), or a reused pid
		 */
		if (check && proc_start_time(p->pid) != p->start_time) {
			proc_release(a, p, "exit");
			continue;
		}
		if (p->maps_pending) {
			int before = p->n_libs, maps_before = p->n_exec_maps;
			int n = proc_scan_libs(a, p);

			if (n >= 0 && p->n_libs > before)
				emit_proc_record(a, p, "libraries");
			/*
			 * The mapping is reported at mmap's entry: read again until
			 * it shows, then once more, since a burst of dlopen()s may
			 * have had a mapping still in flight during this read.
			 */
			if (++p->maps_pending > MAPS_RETRIES)
				p->maps_pending = 0;
			else if (p->n_libs > before || p->n_exec_maps > maps_before)
				p->maps_pending = MAPS_RETRIES;
		}
	}
}

/*
 * Free the slots of processes that are gone, once their threads have been
 * reported for the last time and their last steps cut: aggregate.c deletes
 * a gone thread's entries one interval after it first finds it gone, and
 * the step segmenter cuts a step 2 s after its end (diagnose.h, hold_ns);
 * the slot (the instance, rank and name those last records carry) stays
 * for two intervals and PROC_GONE_KEEP_NS. Without the second, a process
 * that exited within 2 intervals of its last step had those steps written
 * under the host's name.
 */
#define PROC_GONE_KEEP_NS 3000000000ULL

void discovery_reap(struct agent *a)
{
	uint64_t now = now_ns();

	for (int i = 0; i < a->n_procs; i++)
		if (a->procs[i].used && a->procs[i].start_time == PROC_GONE &&
		    ++a->procs[i].gone_intervals >= 2 &&
		    now - a->procs[i].gone_ns >= PROC_GONE_KEEP_NS) {
			proc_index_del(a, &a->procs[i]);
			a->procs[i].used = false;
		}
	while (a->n_procs && !a->procs[a->n_procs - 1].used)
		a->n_procs--;
}

void discovery_stop(struct agent *a)
{
	for (int i = 0; i < a->n_procs; i++) {
		struct proc *p = &a->procs[i];

		if (!p->used || p->start_time == PROC_GONE)
			continue;
		usdt_detach(p);
		python_detach(a, p);
		p->n_libs = 0; /* every file is detached below */
	}
	for (int i = 0; i < MAX_LIBFILES; i++)
		if (a->libs[i].used) {
			uprobes_detach_file(a, i);
			a->libs[i].used = false;
			a->libs[i].idle_since_ns = 0;
		}
	a->cnt.files_idle = 0;
	usdt_free(a);
}
