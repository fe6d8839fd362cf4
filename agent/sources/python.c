// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * python.c - the Python frames of traced processes (--python-stacks): which
 * Python function each thread of an inference engine was running, sampled
 * --python-hz times a second on every CPU by bpf/python.bpf.c.
 *
 * Finding the interpreter: discovery.c hands over every file a traced
 * process maps executable (python_on_mapping, beside usdt.c). A file whose
 * name says python (python3.11, libpython3.12.so.1.0), or the process's own
 * executable (CPython linked in statically, under another name), is read
 * once (cached by device and inode): its symbols _PyRuntime, Py_Version
 * (3.11+) and PyCode_Type. The process's Py_Version, read from its memory
 * (3.10: the file's name, python3.10), picks the layout (python_layout.h);
 * the BPF side gets the address of _PyRuntime.interpreters.head and the
 * offsets in py_procs.
 *
 * Naming frames: a sample carries code object addresses and each frame's
 * instruction. Each code object is read once per process with
 * process_vm_readv(): its type must be PyCode_Type, then co_qualname,
 * co_filename and co_firstlineno, the strings bounded; its line table
 * (co_linetable) once, when a frame of it needs a line, bounded too. A
 * process's memory is the workload's to forge: every read is bounded, a
 * failed or odd read names the frame "?" and is counted, never followed
 * further.
 *
 * What comes out:
 *   - "python_profile" records every --interval: per thread and stack, the
 *     samples that found it there (class event: local sinks; remote sinks in
 *     deep mode, a deep-dive or a released flight-recorder window);
 *   - each sample's innermost two frames to diag.c (diag_on_py_sample), where
 *     an anomaly's "python" suspect says what the process ran in that step;
 *   - the frames that made a CUDA launch (deep mode, with the launch's user
 *     stack): bpf/cuda.bpf.c sends them (PY_F_LAUNCH) just before the
 *     launch's record on rb_cuda; python_launch_json() writes them into that
 *     cuda_launch record as "python_stack", and keeps them named for the
 *     GPU records joined to that launch (capture_hooks.launch_python, from
 *     agent/pipeline/join.c: their "launch_python");
 *   - stats.python.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <jansson.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "elfscan.h"
#include "python_layout.h"
#include "jsonw.h"
#include "utf8.h"
#include "util.h"

#define PY_SYMS_MAX 8192       /* code objects named per process */
#define PY_STACKS_MAX 256      /* distinct (thread, stack) per process and interval */
#define PY_FILES_MAX 4096      /* python files remembered; past it, the oldest is read again */
#define PY_GONE_MAX 16	       /* ended processes --summary remembers */
#define PY_LT_MAX 8192	       /* bytes of a line table read (lines past them: unknown) */
#define PY_LT_BUDGET (1 << 20) /* bytes of line tables held per process */
#define PY_TOP 5	       /* --summary's functions per process */
#define PY_LAUNCH_SLOTS 256    /* launch frames waiting for their launch, by tid */
#define PY_KEPT 4096	       /* the last launches' named frames, kept for their GPU records */
#define PY_KEPT_BUCKETS 8192   /* their index by (tid, time) */
/*
 * A frame's JSON at most: the names escaped (a quote or backslash doubles;
 * read_str() leaves no control character), two integers, the keys.
 */
_Static_assert(2 * (PY_NAME_MAX + PY_NAME_MAX * 2) + 96 <= PY_FRAME_JSON_MAX,
	       "PY_FRAME_JSON_MAX (state.h) holds a frame");

/* a file whose name says python: what its symbols are */
struct py_file {
	dev_t dev;
	ino_t ino;
	bool runtime; /* defines _PyRuntime */
	uint64_t sym_runtime, sym_version, sym_code_type;
	uint64_t vaddr0;    /* the lowest PT_LOAD's p_vaddr, page-aligned */
	uint64_t file_off0; /* and its p_offset, page-aligned */
};

struct py_sym {
	uint64_t code;
	uint64_t qual,
	    file_obj;	    /* co_qualname, co_filename: what says it is still this code object */
	uint32_t checked;   /* the interval (pysrc.epoch) it was last found the same */
	int32_t first_line; /* co_firstlineno */
	bool lt_read;	    /* its line table was asked for (lt: NULL when it has none) */
	uint8_t *lt;
	uint32_t lt_len;
	char func[PY_NAME_MAX];
	char file[PY_NAME_MAX * 2];
};

struct py_stack {
	uint32_t tid;
	uint32_t count;
	uint16_t n, flags;
	uint32_t hash;
	int32_t sym[PY_STACK_DEPTH];  /* -1: not named */
	int32_t line[PY_STACK_DEPTH]; /* the line each frame ran; -1: unknown */
};

/* a traced process that runs a Python the walk knows */
struct pyproc {
	const struct py_layout *l;
	char version[24]; /* "3.11.2"; "3.10" (no Py_Version: from the file's name) */
	uint64_t code_type;
	struct py_sym *syms;
	size_t n_syms, cap_syms;
	int32_t *index; /* open addressing by code address: sym + 1, 0 empty */
	size_t index_cap;
	size_t lt_bytes; /* line tables held (PY_LT_BUDGET) */
	struct py_stack stacks[PY_STACKS_MAX];
	uint32_t n_stacks;
	/* for --summary: samples, and per symbol those it was the innermost frame of */
	uint64_t samples;
	uint32_t *leaf;
	size_t cap_leaf;
};

/* a launch's frames (PY_F_LAUNCH) until its cuda_launch record comes */
struct py_launch {
	uint32_t pid, tid;
	uint64_t ts;
	uint16_t n, flags;
	struct py_frame f[PY_STACK_DEPTH];
};

/*
 * A launch's named frames, for the GPU records joined to it later (a
 * kernel comes when the shim flushes, up to a second after its launch):
 * the last PY_KEPT launches with frames, in a ring, looked up through
 * chains by (tid, time).
 */
struct py_kept {
	uint32_t pid, tid;
	uint64_t ts;
	uint16_t n, flags; /* n 0: its process went (the entry stays chained) */
	bool linked;	   /* in its chain */
	int32_t next;	   /* the chain's next entry; -1: none */
	int32_t sym[PY_STACK_DEPTH], line[PY_STACK_DEPTH];
};

struct py_kept_ring {
	struct py_kept e[PY_KEPT];
	int32_t bucket[PY_KEPT_BUCKETS]; /* first entry of each chain; -1: none */
	uint32_t next;			 /* the entry written next: the oldest */
};

struct pysrc {
	enum { PY_UNAVAILABLE, PY_RUNNING } state; /* off: no struct pysrc at all */
	char error[160];
	int cpus;	       /* CPUs the sampler runs on */
	struct py_file *files; /* a cache by (dev, ino), for the agent's lifetime */
	size_t n_files, cap_files, next_out;
	uint64_t procs, unsupported, samples, frames, symbols, unnamed, unknown_proc,
	    stacks_dropped, profiles, lines_unknown, launch_stacks, launch_unpaired, code_reused;
	uint32_t epoch; /* intervals since the start: a named code object is checked once in each */
	struct py_launch *launch;  /* PY_LAUNCH_SLOTS, at the first launch's frames */
	struct py_kept_ring *kept; /* at the first launch's frames */
	char *gone[PY_GONE_MAX];   /* --summary's lines of the last processes that ended */
	uint64_t n_gone;
	/* samples, procs and unsupported before `agentctl summary --reset` */
	uint64_t base_samples, base_procs, base_unsupported;
};

static const char *const state_names[] = {"unavailable", "running"};

static bool python_gpu_frames(struct agent *a, uint32_t pid, uint32_t tid, uint64_t launch_ts,
			      struct jsonw *w);

int python_start(struct agent *a)
{
	struct pysrc *s;
	int n;

	if (a->opts.python_stacks == PYTHON_STACKS_OFF)
		return 0;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	a->python = s;
	n = loader_python_sampler(a, a->opts.python_hz);
	if (n <= 0) {
		int err = n ? n : -ENODEV;

		if (err == -ENOEXEC)
			snprintf(s->error, sizeof(s->error),
				 "the sampler's BPF program did not load on this kernel");
		else
			snprintf(s->error, sizeof(s->error),
				 "cannot sample the CPUs (perf_event_open): %s", strerror(-err));
		if (a->opts.python_stacks == PYTHON_STACKS_ON) {
			pr_err("--python-stacks on: %s", s->error);
			return err;
		}
		pr_warn("Python frames off: %s", s->error);
		s->state = PY_UNAVAILABLE;
		return 0;
	}
	s->cpus = n;
	s->state = PY_RUNNING;
	a->cap.launch_python = python_gpu_frames;
	pr_info("Python frames: sampling %d CPUs at %u Hz", n, a->opts.python_hz);
	return 0;
}

void python_stop(struct agent *a)
{
	a->cap.launch_python = NULL;
	if (a->python) {
		free(a->python->files);
		free(a->python->launch);
		free(a->python->kept);
		for (int i = 0; i < PY_GONE_MAX; i++)
			free(a->python->gone[i]);
	}
	free(a->python);
	a->python = NULL;
}

/* ------------------------------------------------------ the interpreter -- */

struct sym_scan {
	struct py_file *f;
	int found;
};

static int sym_section(void *ctx, Elf *e, const GElf_Shdr *sh, const char *name, Elf_Data *d)
{
	struct sym_scan *ss = ctx;
	size_t n = sh->sh_entsize ? sh->sh_size / sh->sh_entsize : 0, phn;

	(void)name;
	for (size_t i = 0; i < n; i++) {
		GElf_Sym sym;
		const char *sn;

		if (!gelf_getsym(d, (int)i, &sym) || sym.st_shndx == SHN_UNDEF || !sym.st_value)
			continue;
		sn = elf_strptr(e, sh->sh_link, sym.st_name);
		if (!sn || (sn[0] != '_' && sn[0] != 'P'))
			continue;
		if (!strcmp(sn, "_PyRuntime"))
			ss->f->sym_runtime = sym.st_value;
		else if (!strcmp(sn, "Py_Version"))
			ss->f->sym_version = sym.st_value;
		else if (!strcmp(sn, "PyCode_Type"))
			ss->f->sym_code_type = sym.st_value;
	}
	if (!ss->found && !elf_getphdrnum(e, &phn)) {
		for (size_t i = 0; i < phn; i++) {
			GElf_Phdr ph;

			if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD) {
				ss->f->vaddr0 = ph.p_vaddr & ~0xfffULL;
				ss->f->file_off0 = ph.p_offset & ~0xfffULL;
				ss->found = 1;
				break;
			}
		}
	}
	return 0;
}

static const char *basename_of(const char *path)
{
	const char *b = strrchr(path, '/');

	return b ? b + 1 : path;
}

static bool name_says_python(const char *path)
{
	return strstr(basename_of(path), "python") != NULL;
}

static struct py_file *file_get(struct pysrc *s, uint32_t pid, dev_t dev, ino_t ino,
				const char *path)
{
	struct sym_scan ss;
	char full[600];
	struct py_file *f;
	int err;

	for (size_t i = 0; i < s->n_files; i++)
		if (s->files[i].dev == dev && s->files[i].ino == ino)
			return &s->files[i];
	if (s->n_files == PY_FILES_MAX) {
		f = &s->files[s->next_out++ % PY_FILES_MAX]; /* the oldest goes */
	} else {
		if (grow_array((void **)&s->files, &s->cap_files, s->n_files, sizeof(*s->files),
			       16))
			return NULL;
		f = &s->files[s->n_files];
	}
	memset(f, 0, sizeof(*f));
	f->dev = dev;
	f->ino = ino;
	ss = (struct sym_scan){.f = f};
	snprintf(full, sizeof(full), "/proc/%u/root%s", pid, path);
	err = elf_scan_sections(full, ELF_SECTIONS(SHT_DYNSYM) | ELF_SECTIONS(SHT_SYMTAB),
				sym_section, &ss);
	if (err < 0 && err != -ENOEXEC) {
		pr_debug("pid %u: cannot read %s for Python symbols: %s", pid, full,
			 strerror(-err));
		f->ino = 0; /* not cached (no mapping has inode 0): read again at the next scan */
		return NULL;
	}
	f->runtime = f->sym_runtime && ss.found;
	if (s->n_files < PY_FILES_MAX)
		s->n_files++;
	return f;
}

/* where the file's first PT_LOAD landed in the process, minus its p_vaddr: the load bias */
static bool load_bias(uint32_t pid, const struct py_file *f, uint64_t *bias)
{
	char path[64], line[1024];
	bool ok = false;
	FILE *m;

	snprintf(path, sizeof(path), "/proc/%u/maps", pid);
	m = fopen(path, "re");
	if (!m)
		return false;
	while (!ok && fgets(line, sizeof(line), m)) {
		unsigned long long start, end, off, ino;
		unsigned maj, min;

		if (sscanf(line, "%llx-%llx %*s %llx %x:%x %llu", &start, &end, &off, &maj, &min,
			   &ino) == 6 &&
		    ino == f->ino && makedev(maj, min) == f->dev && off == f->file_off0) {
			*bias = start - f->vaddr0;
			ok = true;
		}
	}
	fclose(m);
	return ok;
}

/* "python3.10" in the file's name: its version; false when it has none */
static bool version_of_name(const char *path, unsigned *major, unsigned *minor)
{
	const char *py = strstr(basename_of(path), "python");

	return py && sscanf(py + 6, "%u.%u", major, minor) == 2;
}

static bool read_mem(uint32_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = {.iov_base = buf, .iov_len = len};
	struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};

	return process_vm_readv((pid_t)pid, &local, 1, &remote, 1, 0) == (ssize_t)len;
}

/*
 * is_exe: the mapping is the process's own executable (discovery.c reads
 * /proc/PID/exe once per scan: it and /proc/PID/maps name files the same
 * way). An engine that links CPython statically (libpython3.x.a) into a
 * program of another name has its interpreter there.
 */
void python_on_mapping(struct agent *a, struct proc *p, dev_t dev, ino_t ino, const char *path,
		       bool is_exe)
{
	struct pysrc *s = a->python;
	const struct py_layout *l;
	struct py_proc pp;
	struct py_file *f;
	uint64_t bias, version = 0;
	unsigned major, minor;
	char ver[24];
	int err;

	if (!s || s->state != PY_RUNNING || p->py || p->py_refused ||
	    (!name_says_python(path) && !is_exe))
		return;
	f = file_get(s, p->pid, dev, ino, path);
	if (!f || !f->runtime || !load_bias(p->pid, f, &bias))
		return;
	if (f->sym_version && read_mem(p->pid, bias + f->sym_version, &version, sizeof(version))) {
		major = (unsigned)(version >> 24) & 0xff;
		minor = (unsigned)(version >> 16) & 0xff;
		l = py_layout_of(major, minor);
		snprintf(ver, sizeof(ver), "%u.%u.%u", major, minor,
			 (unsigned)(version >> 8) & 0xff);
	} else if (version_of_name(path, &major, &minor)) {
		/* Py_Version came with 3.11: before it, the file's name is all there is */
		l = py_layout_of(major, minor);
		if (l && l->version >= 0x30b)
			l = NULL; /* a 3.11+ without Py_Version is not what it says */
		snprintf(ver, sizeof(ver), "%u.%u", major, minor);
	} else {
		l = NULL;
		snprintf(ver, sizeof(ver), "of unknown version");
	}
#if !defined(__x86_64__)
	if (l && l->tid_is_pthread)
		l = NULL; /* its threads are matched by the x86-64 fs base */
#endif
	if (!l || !f->sym_code_type) {
		p->py_refused = true;
		s->unsupported++;
		pr_warn("pid %u: Python %s (%s): its frames are not sampled (3.10-3.13 are)",
			p->pid, ver, path);
		return;
	}
	p->py = calloc(1, sizeof(*p->py));
	if (!p->py)
		return;
	p->py->l = l;
	snprintf(p->py->version, sizeof(p->py->version), "%s", ver);
	p->py->code_type = bias + f->sym_code_type;
	pp = (struct py_proc){
	    .interp_head = bias + f->sym_runtime + l->runtime_interp_head,
	    .interp_threads = l->interp_threads_head,
	    .tstate_next = l->tstate_next,
	    .tstate_tid = l->tstate_native_tid,
	    .tstate_frame = l->tstate_frame,
	    .cframe_frame = l->cframe_frame,
	    .frame_code = l->frame_code,
	    .frame_previous = l->frame_previous,
	    .frame_owner = l->frame_owner,
	    .owner_cstack = l->owner_cstack,
	    .tid_is_pthread = l->tid_is_pthread,
	    .frame_instr = l->frame_instr,
	};
	err = loader_python_proc(a, p->pid, &pp);
	if (err) {
		pr_warn("pid %u: cannot add to py_procs: %s", p->pid, strerror(-err));
		free(p->py);
		p->py = NULL;
		return;
	}
	s->procs++;
	pr_info("pid %u: Python %s frames sampled (%s)", p->pid, ver, path);
}

static void proc_syms_free(struct pyproc *py)
{
	for (size_t i = 0; i < py->n_syms; i++)
		free(py->syms[i].lt);
	free(py->syms);
	free(py->index);
	free(py->leaf);
}

static char *proc_summary(const struct proc *p);

static void profile_flush(struct agent *a, struct proc *p, uint64_t now);

/* the process's profile so far, then its entry: at its exit or exec */
void python_detach(struct agent *a, struct proc *p)
{
	if (p->py) {
		struct pysrc *s = a->python;

		if (s)
			profile_flush(a, p, now_ns());
		if (s && p->py->samples) { /* --summary remembers the last few */
			free(s->gone[s->n_gone % PY_GONE_MAX]);
			s->gone[s->n_gone++ % PY_GONE_MAX] = proc_summary(p);
		}
		loader_python_proc(a, p->pid, NULL);
		/* its kept launch frames name its symbols, which go now */
		for (size_t i = 0; s && s->kept && i < PY_KEPT; i++)
			if (s->kept->e[i].pid == p->pid)
				s->kept->e[i].n = 0;
		proc_syms_free(p->py);
		free(p->py);
		p->py = NULL;
	}
	p->py_refused = false;
}

/* -------------------------------------------------------- naming frames -- */

/*
 * A str object of the process as UTF-8 into out (at most out_sz - 1 bytes):
 * compact strings only (every identifier and file name), any kind.
 */
static bool read_str(uint32_t pid, const struct py_layout *l, uint64_t addr, char *out,
		     size_t out_sz)
{
	unsigned char hdr[80], raw[PY_NAME_MAX * 2 * 4];
	uint64_t len;
	uint32_t state, kind;
	size_t o = 0, n;

	out[0] = 0;
	if (!addr || l->str_compact_size > sizeof(hdr) ||
	    !read_mem(pid, addr, hdr, l->str_ascii_size))
		return false;
	memcpy(&len, hdr + l->str_length, sizeof(len));
	memcpy(&state, hdr + l->str_state, sizeof(state));
	kind = PY_STR_KIND(state);
	if (!PY_STR_COMPACT(state) || (kind != 1 && kind != 2 && kind != 4) || len > 1u << 20)
		return false;
	n = len < out_sz - 1 ? len : out_sz - 1; /* each character is a byte at least */
	if (n * kind > sizeof(raw))
		n = sizeof(raw) / kind;
	if (n &&
	    !read_mem(pid, addr + (PY_STR_ASCII(state) ? l->str_ascii_size : l->str_compact_size),
		      raw, n * kind))
		return false;
	for (size_t i = 0; i < n; i++) {
		uint32_t c = kind == 1	 ? raw[i]
			     : kind == 2 ? (uint32_t)raw[2 * i] | (uint32_t)raw[2 * i + 1] << 8
					 : (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 |
					       (uint32_t)raw[4 * i + 2] << 16 |
					       (uint32_t)raw[4 * i + 3] << 24;
		char u[4];
		int k;

		if (c < 0x20 || c == 0x7f || (c >= 0xd800 && c < 0xe000) || c > 0x10ffff)
			c = '?'; /* no control characters or lone surrogates in a record */
		k = utf8_put(c, u);
		if (o + (size_t)k > out_sz - 1)
			break; /* cut at a character, never inside one */
		memcpy(out + o, u, (size_t)k);
		o += (size_t)k;
	}
	out[o] = 0;
	return true;
}

/*
 * The code object's header at addr: its name and file objects and first
 * line. 1; 0 when what is there is not a code object (any more); -1 when
 * the memory could not be read (unmapped, or the process is gone)
 */
static int read_code_head(uint32_t pid, const struct pyproc *py, uint64_t addr, uint64_t *qual,
			  uint64_t *file, int32_t *first)
{
	const struct py_layout *l = py->l;
	unsigned char c[256];
	uint64_t type;
	size_t need = l->code_qualname + 8;

	if (need > sizeof(c) || !read_mem(pid, addr, c, need))
		return -1;
	memcpy(&type, c + 8, sizeof(type)); /* PyObject.ob_type */
	if (type != py->code_type)
		return 0;
	memcpy(qual, c + l->code_qualname, sizeof(*qual));
	memcpy(file, c + l->code_filename, sizeof(*file));
	memcpy(first, c + l->code_firstlineno, sizeof(*first));
	return 1;
}

/*
 * The code object at addr, read from the process: false when it is not one
 * or its name cannot be read (then out holds what its header said, func "")
 */
static bool read_code(uint32_t pid, const struct pyproc *py, uint64_t addr, struct py_sym *out)
{
	const struct py_layout *l = py->l;
	uint64_t qual = 0, file = 0;
	int32_t first = -1;

	*out = (struct py_sym){.code = addr, .first_line = -1};
	if (read_code_head(pid, py, addr, &qual, &file, &first) != 1)
		return false;
	*out = (struct py_sym){.code = addr, .qual = qual, .file_obj = file, .first_line = first};
	if (!read_str(pid, l, qual, out->func, sizeof(out->func)) || !out->func[0]) {
		out->func[0] = 0;
		return false;
	}
	if (!read_str(pid, l, file, out->file, sizeof(out->file)))
		snprintf(out->file, sizeof(out->file), "?");
	return true;
}

static size_t code_hash(uint64_t code, size_t cap)
{
	return (size_t)((code >> 4) * 0x9e3779b97f4a7c15ULL >> 17) & (cap - 1);
}

static bool index_put(struct pyproc *py, uint64_t code, int32_t sym)
{
	if (2 * (py->n_syms + 1) > py->index_cap) {
		size_t cap = py->index_cap ? 2 * py->index_cap : 256;
		int32_t *ix = calloc(cap, sizeof(*ix));

		if (!ix)
			return false;
		for (size_t i = 0; i < py->index_cap; i++)
			if (py->index[i]) {
				size_t h = code_hash(py->syms[py->index[i] - 1].code, cap);

				while (ix[h])
					h = (h + 1) & (cap - 1);
				ix[h] = py->index[i];
			}
		free(py->index);
		py->index = ix;
		py->index_cap = cap;
	}
	for (size_t h = code_hash(code, py->index_cap);; h = (h + 1) & (py->index_cap - 1))
		if (!py->index[h]) {
			py->index[h] = sym + 1;
			return true;
		}
}

/*
 * Still the code object it was named as? A code object freed and another
 * made at its address (exec, a closure, torch.compile's generated code)
 * would keep the first one's name: once an interval its header is read
 * again, and a different name, file or first line means another object.
 */
static bool sym_current(struct pysrc *s, uint32_t pid, const struct pyproc *py, struct py_sym *sym)
{
	uint64_t qual = 0, file = 0;
	int32_t first = -1;

	if (sym->checked == s->epoch)
		return true;
	switch (read_code_head(pid, py, sym->code, &qual, &file, &first)) {
	case -1: /* unreadable (the process ended, its samples still come): nothing to say */
		break;
	case 0: /* not a code object now: one when named (qual set) means freed and reused */
		if (sym->qual)
			return false;
		break;
	default:
		if (qual != sym->qual || file != sym->file_obj || first != sym->first_line)
			return false;
	}
	sym->checked = s->epoch;
	return true;
}

/* the symbol of a frame's code object: its index, or -1 when it cannot be named */
static int32_t sym_of(struct pysrc *s, uint32_t pid, struct pyproc *py, uint64_t code)
{
	struct py_sym sym;
	int32_t *slot = NULL;

	if (py->index_cap)
		for (size_t h = code_hash(code, py->index_cap); py->index[h];
		     h = (h + 1) & (py->index_cap - 1))
			if (py->syms[py->index[h] - 1].code == code) {
				if (sym_current(s, pid, py, &py->syms[py->index[h] - 1]))
					return py->index[h] - 1;
				slot = &py->index[h]; /* another object now: named anew below */
				s->code_reused++;
				break;
			}
	if (py->n_syms >= PY_SYMS_MAX) {
		/*
		 * no room to name the new object: the old entry stays for its kept
		 * launch frames but matches no address (a code object is never at
		 * the last byte), so the new one is treated as any unnamed one past
		 * the bound instead of being read again at every sample
		 */
		if (slot)
			py->syms[*slot - 1].code = UINT64_MAX;
		s->unnamed++;
		return -1;
	}
	/* one that cannot be read is remembered as such (until the next interval) */
	if (!read_code(pid, py, code, &sym))
		s->unnamed++; /* its header as read: checked like a named one */
	sym.checked = s->epoch;
	/* the old entry stays: kept launch frames may point at it */
	if (grow_array((void **)&py->syms, &py->cap_syms, py->n_syms, sizeof(*py->syms), 64))
		return -1;
	if (slot)
		*slot = (int32_t)py->n_syms + 1;
	else if (!index_put(py, code, (int32_t)py->n_syms))
		return -1;
	py->syms[py->n_syms] = sym;
	s->symbols += sym.func[0] != 0;
	return (int32_t)py->n_syms++;
}

/* "func (file:line)": line, or the function's first line where line < 0 */
static int frame_text(const struct pyproc *py, int32_t sym, int32_t line, char *out, size_t sz)
{
	if (sym < 0 || !py->syms[sym].func[0])
		return py_frame_text(out, sz, NULL, NULL, -1);
	return py_frame_text(out, sz, py->syms[sym].func, py->syms[sym].file,
			     line >= 0 ? line : py->syms[sym].first_line);
}

/* -------------------------------------------------------------- lines -- */

/* the code object's line table, read once (bounded): false when it has none */
static bool linetable(uint32_t pid, struct pyproc *py, struct py_sym *sym)
{
	const struct py_layout *l = py->l;
	uint64_t tab = 0, size = 0;

	if (sym->lt_read)
		return sym->lt != NULL;
	sym->lt_read = true;
	if (py->lt_bytes >= PY_LT_BUDGET ||
	    !read_mem(pid, sym->code + l->code_linetable, &tab, sizeof(tab)) || !tab ||
	    !read_mem(pid, tab + l->bytes_size, &size, sizeof(size)) || !size)
		return false;
	if (size > PY_LT_MAX)
		size = PY_LT_MAX; /* the lines of what lies past it are unknown */
	sym->lt = malloc(size);
	if (sym->lt && !read_mem(pid, tab + l->bytes_data, sym->lt, size)) {
		free(sym->lt);
		sym->lt = NULL;
	}
	if (!sym->lt)
		return false;
	sym->lt_len = (uint32_t)size;
	py->lt_bytes += size;
	return true;
}

/*
 * 3.10 (PEP 626, Objects/lnotab_notes.txt): (byte delta, line delta) pairs
 * from the first line at address 0; a line delta of -128: no line. The
 * line of the instruction at byte offset addr; -1: none
 */
static int32_t line_626(const uint8_t *t, uint32_t len, int32_t line, uint64_t addr)
{
	uint64_t end = 0;

	for (uint32_t i = 0; i + 1 < len; i += 2) {
		uint64_t start = end;
		int8_t ld = (int8_t)t[i + 1];
		int32_t at = ld == -128 ? -1 : (line += ld);

		end += t[i];
		if (addr >= start && addr < end)
			return at;
	}
	return -1;
}

/* the location table's varints: 6 bits a byte, low first, bit 6 says more */
static uint32_t varint(const uint8_t *t, uint32_t len, uint32_t *i)
{
	uint32_t v = 0, shift = 0;
	uint8_t b;

	do {
		if (*i >= len)
			return v;
		b = t[(*i)++];
		v |= (uint32_t)(b & 63) << shift;
		shift += 6;
	} while ((b & 64) && shift < 30);
	return v;
}

static int32_t svarint(const uint8_t *t, uint32_t len, uint32_t *i)
{
	uint32_t u = varint(t, len, i);

	return u & 1 ? -(int32_t)(u >> 1) : (int32_t)(u >> 1);
}

/*
 * 3.11+ (PEP 657, CPython's Objects/locations.md): entries of a first byte
 * 1CCCCLLL (code C, L + 1 code units) and what the code says follows: 15 no
 * location; 14 line delta (svarint) and three varints; 13 line delta; 10-12
 * line delta C - 10 and two bytes; 0-9 one byte, same line. The line of
 * code unit unit; -1: none, or a table that does not read as one
 */
static int32_t line_657(const uint8_t *t, uint32_t len, int32_t line, uint64_t unit)
{
	uint64_t at = 0;
	uint32_t i = 0;

	while (i < len) {
		uint8_t b = t[i++];
		uint32_t code = b >> 3 & 15, n = (b & 7) + 1;
		int32_t here = line;

		if (!(b & 0x80))
			return -1;
		if (code == 15) {
			here = -1;
		} else if (code == 14) {
			here = line += svarint(t, len, &i);
			for (int k = 0; k < 3; k++)
				varint(t, len, &i);
		} else if (code == 13) {
			here = line += svarint(t, len, &i);
		} else if (code >= 10) {
			here = line += (int32_t)code - 10;
			i += 2;
		} else {
			i += 1;
		}
		if (unit >= at && unit < at + n)
			return here;
		at += n;
	}
	return -1;
}

/* the line a frame of sym runs, from its instruction (py_proc.frame_instr); -1: unknown */
static int32_t line_of(struct pysrc *s, uint32_t pid, struct pyproc *py, int32_t si, uint64_t instr)
{
	const struct py_layout *l = py->l;
	struct py_sym *sym;
	int32_t line = -1;

	if (si < 0 || !py->syms[si].func[0])
		return -1;
	sym = &py->syms[si];
	if (linetable(pid, py, sym)) {
		if (l->lines == PY_LINES_626) {
			int32_t lasti = (int32_t)(uint32_t)instr; /* f_lasti: code units; -1 */

			if (lasti >= 0)
				line = line_626(sym->lt, sym->lt_len, sym->first_line,
						(uint64_t)lasti * 2);
		} else if (instr >= sym->code + l->code_code &&
			   instr - (sym->code + l->code_code) < 2ULL << 24) {
			line = line_657(sym->lt, sym->lt_len, sym->first_line,
					(instr - (sym->code + l->code_code)) / 2);
		}
	}
	if (line < 0)
		s->lines_unknown++;
	return line;
}

static void stack_count(struct pysrc *s, struct pyproc *py, uint32_t tid, const int32_t *sym,
			const int32_t *line, uint16_t n, uint16_t flags)
{
	uint32_t h = tid * 2654435761u ^ n;
	struct py_stack *st;

	for (uint16_t i = 0; i < n; i++)
		h = ((h ^ (uint32_t)sym[i]) * 16777619u ^ (uint32_t)line[i]) * 16777619u;
	for (uint32_t i = 0; i < py->n_stacks; i++) {
		st = &py->stacks[i];
		if (st->hash == h && st->tid == tid && st->n == n && st->flags == flags &&
		    !memcmp(st->sym, sym, n * sizeof(*sym)) &&
		    !memcmp(st->line, line, n * sizeof(*line))) {
			st->count++;
			return;
		}
	}
	if (py->n_stacks == PY_STACKS_MAX) {
		s->stacks_dropped++;
		return;
	}
	st = &py->stacks[py->n_stacks++];
	*st = (struct py_stack){.tid = tid, .count = 1, .n = n, .flags = flags, .hash = h};
	memcpy(st->sym, sym, n * sizeof(*sym));
	memcpy(st->line, line, n * sizeof(*line));
}

/* room in py->leaf for symbol i, new slots zeroed: false without memory */
static bool leaf_room(struct pyproc *py, size_t i)
{
	size_t cap = py->cap_leaf;
	uint32_t *l;

	if (i < cap)
		return true;
	while (cap <= i)
		cap = cap ? 2 * cap : 64;
	l = realloc(py->leaf, cap * sizeof(*l));
	if (!l)
		return false;
	memset(l + py->cap_leaf, 0, (cap - py->cap_leaf) * sizeof(*l));
	py->leaf = l;
	py->cap_leaf = cap;
	return true;
}

/*
 * n walked frames named into sym[] and line[], the entry frames of C calls
 * (3.12+: code 0, no function) left out; returns how many are named
 */
static uint16_t frames_name(struct pysrc *s, uint32_t pid, struct pyproc *py,
			    const struct py_frame *f, uint16_t n, int32_t *sym, int32_t *line)
{
	uint16_t k = 0;

	for (uint16_t i = 0; i < n; i++) {
		if (!f[i].code)
			continue;
		sym[k] = sym_of(s, pid, py, f[i].code);
		line[k] = line_of(s, pid, py, sym[k], f[i].instr);
		k++;
	}
	return k;
}

static void launch_hold(struct pysrc *s, const struct py_stack_event *e);

void python_on_stack(struct agent *a, const struct py_stack_event *e)
{
	struct pysrc *s = a->python;
	struct proc *p = proc_find_live(a, e->hdr.pid);
	int32_t sym[PY_STACK_DEPTH], line[PY_STACK_DEPTH];
	char where[192];
	uint16_t n;
	int o;

	if (!s)
		return;
	if (e->flags & PY_F_LAUNCH) {
		launch_hold(s, e);
		return;
	}
	if (!p || !p->py) {
		s->unknown_proc++; /* it exited, or exec'd, since the sample */
		return;
	}
	n = frames_name(s, p->pid, p->py, e->f, e->n, sym, line);
	if (!n)
		return;
	s->samples++;
	s->frames += n;
	p->py->samples++;
	if (sym[0] >= 0 && leaf_room(p->py, (size_t)sym[0]))
		p->py->leaf[sym[0]]++;
	stack_count(s, p->py, e->hdr.tid, sym, line, n, e->flags);
	/*
	 * diagnosis gets the innermost two: what ran (by its first line, so
	 * that the samples of one function count together), and the line
	 * that called it
	 */
	o = frame_text(p->py, sym[0], -1, where, sizeof(where));
	if (n > 1 && o > 0 && (size_t)o < sizeof(where)) {
		char caller[160];

		frame_text(p->py, sym[1], line[1], caller, sizeof(caller));
		snprintf(where + o, sizeof(where) - (size_t)o, " <- %s", caller);
	}
	diag_on_py_sample(a->diag, e->hdr.pid, e->hdr.tid, e->hdr.ts_ns, where);
}

/* ------------------------------------------------- the launch's frames -- */

/* a launch's frames, held by tid until its record (the next on rb_cuda of that thread) */
static void launch_hold(struct pysrc *s, const struct py_stack_event *e)
{
	struct py_launch *l;

	if (!s->launch && !(s->launch = calloc(PY_LAUNCH_SLOTS, sizeof(*s->launch))))
		return;
	l = &s->launch[e->hdr.tid % PY_LAUNCH_SLOTS];
	/*
	 * still held: its launch record was lost (the ring was full), or a
	 * thread whose tid shares the slot sent frames in between
	 */
	if (l->n)
		s->launch_unpaired++;
	l->pid = e->hdr.pid;
	l->tid = e->hdr.tid;
	l->ts = e->hdr.ts_ns;
	l->n = e->n;
	l->flags = e->flags;
	memcpy(l->f, e->f, e->n * sizeof(e->f[0]));
}

/*
 * One frame as "stack" holds it in python_profile, python_stack in
 * cuda_launch and launch_python in GPU records: file NULL, first_line or
 * line < 0 leave that field out
 */
void python_frame_json(struct jsonw *w, const char *func, const char *file, int64_t first_line,
		       int64_t line)
{
	jw_next(w);
	jw_open(w, '{');
	jw_str(w, "function", func && *func ? func : "?");
	if (file)
		jw_str(w, "file", file);
	if (first_line >= 0)
		jw_int(w, "first_line", first_line);
	if (line >= 0)
		jw_int(w, "line", line);
	jw_close(w, '}');
}

/*
 * A name from elsewhere (a recording) as read_str() makes one from a
 * process: UTF-8 in, at most out_sz - 1 bytes cut at a character, control
 * characters as '?'; NULL stays NULL
 */
const char *python_name_clean(const char *in, char *out, size_t out_sz)
{
	size_t o = 0, n, k;

	if (!in)
		return NULL;
	n = strlen(in);
	for (size_t i = 0; i < n; i += k) {
		k = jw_utf8_seq((const unsigned char *)in + i, n - i);
		if (!k)
			k = 1; /* not UTF-8: the reader let none through; one byte, replaced */
		if (o + k > out_sz - 1)
			break;
		if (k == 1 && ((unsigned char)in[i] < 0x20 || in[i] == 0x7f || (in[i] & 0x80)))
			out[o++] = '?';
		else {
			memcpy(out + o, in + i, k);
			o += k;
		}
	}
	out[o] = 0;
	return out;
}

static void frame_json(struct jsonw *w, const struct pyproc *py, int32_t si, int32_t line)
{
	const struct py_sym *sym = si >= 0 && py->syms[si].func[0] ? &py->syms[si] : NULL;

	if (sym)
		python_frame_json(w, sym->func, sym->file, sym->first_line, line);
	else
		python_frame_json(w, "?", NULL, -1, -1);
}

static size_t kept_bucket(uint32_t tid, uint64_t ts)
{
	return (size_t)((ts ^ (uint64_t)tid * 0x9e3779b97f4a7c15ULL) * 0xff51afd7ed558ccdULL >>
			40) %
	       PY_KEPT_BUCKETS;
}

static struct py_kept_ring *kept_ring(struct pysrc *s)
{
	if (!s->kept && (s->kept = malloc(sizeof(*s->kept)))) {
		memset(s->kept->e, 0, sizeof(s->kept->e));
		memset(s->kept->bucket, 0xff, sizeof(s->kept->bucket)); /* -1 */
		s->kept->next = 0;
	}
	return s->kept;
}

/* the ring's oldest entry, out of its chain, for a new launch (pid, tid, ts) */
static struct py_kept *kept_new(struct py_kept_ring *r, uint32_t pid, uint32_t tid, uint64_t ts)
{
	int32_t i = (int32_t)(r->next++ % PY_KEPT), *pp;
	struct py_kept *k = &r->e[i];
	size_t b;

	if (k->linked) {
		for (pp = &r->bucket[kept_bucket(k->tid, k->ts)]; *pp >= 0; pp = &r->e[*pp].next)
			if (*pp == i) {
				*pp = k->next;
				break;
			}
	}
	b = kept_bucket(tid, ts);
	*k = (struct py_kept){
	    .pid = pid, .tid = tid, .ts = ts, .linked = true, .next = r->bucket[b]};
	r->bucket[b] = i;
	return k;
}

static const struct py_kept *kept_find(const struct py_kept_ring *r, uint32_t pid, uint32_t tid,
				       uint64_t ts)
{
	for (int32_t i = r->bucket[kept_bucket(tid, ts)]; i >= 0; i = r->e[i].next) {
		const struct py_kept *k = &r->e[i];

		if (k->ts == ts && k->tid == tid && k->pid == pid)
			return k->n ? k : NULL;
	}
	return NULL;
}

/* n named frames as a JSON array under key */
static void frames_json(struct jsonw *w, const char *key, const struct pyproc *py,
			const int32_t *sym, const int32_t *line, uint16_t n)
{
	jw_key(w, key);
	jw_open(w, '[');
	for (uint16_t i = 0; i < n; i++)
		frame_json(w, py, sym[i], line[i]);
	jw_close(w, ']');
}

void python_launch_json(struct agent *a, uint32_t pid, uint32_t tid, uint64_t ts, struct jsonw *w)
{
	struct pysrc *s = a->python;
	struct py_launch *l;
	struct py_kept *k;
	struct proc *p;
	uint16_t n;

	if (!s || !s->launch)
		return;
	l = &s->launch[tid % PY_LAUNCH_SLOTS];
	if (!l->n || l->tid != tid || l->pid != pid || l->ts != ts)
		return;
	n = l->n;
	l->n = 0; /* taken */
	p = proc_find_live(a, pid);
	if (!p || !p->py) {
		s->unknown_proc++;
		return;
	}
	if (!kept_ring(s))
		return;
	/* named once, kept for the launch's GPU records (python_gpu_frames) */
	k = kept_new(s->kept, pid, tid, ts);
	k->flags = l->flags;
	k->n = frames_name(s, pid, p->py, l->f, n, k->sym, k->line);
	frames_json(w, "python_stack", p->py, k->sym, k->line, k->n);
	if (k->flags & PY_F_TRUNCATED)
		jw_bool(w, "python_truncated", 1);
	s->launch_stacks++;
}

/* capture_hooks.launch_python: a GPU record joined to a launch whose frames were kept */
static bool python_gpu_frames(struct agent *a, uint32_t pid, uint32_t tid, uint64_t launch_ts,
			      struct jsonw *w)
{
	struct pysrc *s = a->python;
	const struct py_kept *k;
	struct proc *p;

	if (!s || !s->kept || !(k = kept_find(s->kept, pid, tid, launch_ts)))
		return false;
	p = proc_find_live(a, pid);
	if (!p || !p->py)
		return false;
	frames_json(w, "launch_python", p->py, k->sym, k->line, k->n);
	return true;
}

/* ---------------------------------------------------------- the profile -- */

static int emit_profile(struct agent *a, struct proc *p, const struct py_stack *st, uint64_t now)
{
	static char buf[PY_STACK_JSON_MAX + 1024];
	const struct pyproc *py = p->py;
	const char *inst = agent_instance_of(a, p->pid);
	struct jsonw w;
	long len;

	jw_init(&w, buf, sizeof(buf));
	jw_common(&w, "python_profile", a->host, inst, p->pid, st->tid ? (int64_t)st->tid : JW_OMIT,
		  now);
	jw_uint(&w, "samples", st->count);
	jw_uint(&w, "hz", a->opts.python_hz);
	jw_str(&w, "python", py->version);
	jw_bool(&w, "truncated", st->flags & PY_F_TRUNCATED);
	frames_json(&w, "stack", py, st->sym, st->line, st->n);
	len = jw_end(&w);
	if (len < 0) {
		a->cnt.json_errors++;
		return -ENOSPC;
	}
	return rec_emit_raw(a, REC_EVENT, inst, buf, (size_t)len);
}

/* the process's stacks of the interval as python_profile records, then none */
static void profile_flush(struct agent *a, struct proc *p, uint64_t now)
{
	for (uint32_t k = 0; k < p->py->n_stacks; k++)
		if (!emit_profile(a, p, &p->py->stacks[k], now))
			a->python->profiles++;
	p->py->n_stacks = 0;
}

void python_interval(struct agent *a, uint64_t now)
{
	struct pysrc *s = a->python;

	if (!s)
		return;
	s->epoch++; /* each named code object is checked again once (sym_current) */
	for (int i = 0; i < a->n_procs; i++) {
		struct proc *p = &a->procs[i];

		if (p->used && p->py)
			profile_flush(a, p, now);
	}
}

void python_stats(struct agent *a, json_t *r)
{
	struct pysrc *s = a->python;
	struct gpu_counts n = {0};
	json_t *o;

	if (!s)
		return;
	if (a->gpu) /* the join appends launch_python and counts it */
		gpu_counts(a->gpu, &n);
	o = json_pack("{s:s,s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "state",
		      state_names[s->state], "hz", (int)a->opts.python_hz, "cpus", s->cpus,
		      "processes", (json_int_t)s->procs, "unsupported", (json_int_t)s->unsupported,
		      "samples", (json_int_t)s->samples, "frames", (json_int_t)s->frames, "symbols",
		      (json_int_t)s->symbols, "unnamed", (json_int_t)s->unnamed, "unknown_process",
		      (json_int_t)s->unknown_proc, "stacks_dropped", (json_int_t)s->stacks_dropped,
		      "profiles", (json_int_t)s->profiles, "lines_unknown",
		      (json_int_t)s->lines_unknown);
	if (o) {
		json_object_set_new(o, "launch_stacks", json_integer((json_int_t)s->launch_stacks));
		json_object_set_new(o, "launch_unpaired",
				    json_integer((json_int_t)s->launch_unpaired));
		json_object_set_new(o, "gpu_records", json_integer((json_int_t)n.launch_python));
		json_object_set_new(o, "code_reused", json_integer((json_int_t)s->code_reused));
	}
	if (o && s->error[0])
		json_object_set_new(o, "error", rec_string(s->error));
	if (o)
		json_object_set_new(r, "python", o);
}

/* ------------------------------------------------------------ --summary -- */

/* the process's line and its PY_TOP innermost functions, malloc'd */
static char *proc_summary(const struct proc *p)
{
	const struct pyproc *py = p->py;
	uint32_t top[PY_TOP] = {0};
	int32_t topi[PY_TOP];
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	for (int k = 0; k < PY_TOP; k++)
		topi[k] = -1;
	for (size_t i = 0; i < py->cap_leaf && i < py->n_syms; i++)
		for (int k = 0; k < PY_TOP; k++)
			if (py->leaf[i] > top[k]) {
				memmove(&top[k + 1], &top[k], (PY_TOP - 1 - k) * sizeof(top[0]));
				memmove(&topi[k + 1], &topi[k], (PY_TOP - 1 - k) * sizeof(topi[0]));
				top[k] = py->leaf[i];
				topi[k] = (int32_t)i;
				break;
			}
	fprintf(f, "  pid %u (%s, Python %s): %llu samples; innermost frames found most:\n", p->pid,
		p->comm, py->version, (unsigned long long)py->samples);
	for (int k = 0; k < PY_TOP && topi[k] >= 0; k++) {
		char where[PY_NAME_MAX * 3];

		frame_text(py, topi[k], -1, where, sizeof(where));
		fprintf(f, "    %6u  %3.0f%%  %s\n", top[k], 100.0 * top[k] / py->samples, where);
	}
	fclose(f);
	return buf;
}

/*
 * `agentctl summary --reset`: the section counts anew; a running process
 * counts again from its next sample, the ended ones' lines go
 */
void python_summary_reset(struct agent *a)
{
	struct pysrc *s = a->python;
	uint64_t live = 0, refused = 0;

	if (!s)
		return;
	for (int i = 0; i < a->n_procs; i++) {
		struct proc *p = &a->procs[i];

		if (!p->used)
			continue;
		refused += p->py_refused;
		if (!p->py)
			continue;
		live++;
		p->py->samples = 0;
		if (p->py->leaf)
			memset(p->py->leaf, 0, p->py->cap_leaf * sizeof(*p->py->leaf));
	}
	s->base_samples = s->samples;
	s->base_procs = s->procs - live;
	s->base_unsupported = s->unsupported - refused;
	for (int i = 0; i < PY_GONE_MAX; i++) {
		free(s->gone[i]);
		s->gone[i] = NULL;
	}
	s->n_gone = 0;
}

void python_print_summary(struct agent *a, FILE *out)
{
	struct pysrc *s = a->python;

	if (!s)
		return;
	fprintf(out, "\nPython frames (--python-stacks, %u Hz)\n", a->opts.python_hz);
	if (s->state != PY_RUNNING) {
		fprintf(out, "  not sampled: %s\n", s->error);
		return;
	}
	fprintf(out, "  %llu samples of %llu processes",
		(unsigned long long)(s->samples - s->base_samples),
		(unsigned long long)(s->procs - s->base_procs));
	if (s->unsupported > s->base_unsupported)
		fprintf(out, "; %llu with a Python not walked",
			(unsigned long long)(s->unsupported - s->base_unsupported));
	fprintf(out, "\n");
	if (s->n_gone > PY_GONE_MAX)
		fprintf(out, "  (%llu ended earlier, not shown; the last %d:)\n",
			(unsigned long long)(s->n_gone - PY_GONE_MAX), PY_GONE_MAX);
	for (uint64_t i = s->n_gone > PY_GONE_MAX ? s->n_gone - PY_GONE_MAX : 0; i < s->n_gone; i++)
		if (s->gone[i % PY_GONE_MAX])
			fputs(s->gone[i % PY_GONE_MAX], out);
	for (int i = 0; i < a->n_procs; i++) {
		const struct proc *p = &a->procs[i];
		char *text;

		if (!p->used || !p->py || !p->py->samples || !(text = proc_summary(p)))
			continue;
		fputs(text, out);
		free(text);
	}
}
