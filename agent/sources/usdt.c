// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * usdt.c - the step probes of include/infertrace/step.h in traced processes
 * (bpf/usdt.bpf.c).
 *
 * A native engine is as often a shared library (a Python extension, loaded
 * with dlopen long after exec) as an executable, so every file a traced
 * process maps executable is looked at: discovery.c hands each one over
 * when it reads /proc/PID/maps, at first sight and again whenever
 * bpf/proc.bpf.c reports a new executable mapping of the process. A file
 * that carries USDT notes of provider "infertrace" gets the two programs
 * attached for that pid (libbpf finds the probe sites, the argument
 * locations and the semaphores, which the kernel then counts up so the
 * engine evaluates the arguments; it also translates a library's addresses).
 * The links go with the process, or with its image at exec, destroyed off
 * the event loop (uprobes_reap_links()).
 *
 * Reading a file's notes means parsing its ELF headers, and a Python
 * process maps hundreds of libraries that the same and other processes map
 * again: the answer is cached per file (device, inode as /proc/PID/maps
 * shows them) for the agent's lifetime, so each distinct file is read once.
 * Files are opened as /proc/PID/root/<path>, so a container's own copy is
 * the file read and probed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "elfscan.h"
#include "util.h"

#define PROVIDER "infertrace"

/* a file (as /proc/PID/maps names it) and whether it carries our notes */
struct usdt_file {
	dev_t dev;
	ino_t ino;
	bool has_notes;
};

/* every file read so far, sorted by (dev, ino); lives as long as the agent */
struct usdt_cache {
	struct usdt_file *files;
	size_t n, cap;
};

/* step probes attached in one file a process maps */
struct usdt_link {
	dev_t dev;
	ino_t ino;
	struct bpf_link *links[USDT_LINKS]; /* all NULL: attaching failed, said once */
};

static int file_cmp(dev_t dev, ino_t ino, const struct usdt_file *f)
{
	if (dev != f->dev)
		return dev < f->dev ? -1 : 1;
	if (ino != f->ino)
		return ino < f->ino ? -1 : 1;
	return 0;
}

/* index of (dev, ino) in the cache, else -(insertion point) - 1 */
static long cache_find(const struct usdt_cache *c, dev_t dev, ino_t ino)
{
	size_t lo = 0, hi = c->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int d = file_cmp(dev, ino, &c->files[mid]);

		if (!d)
			return (long)mid;
		if (d < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -(long)lo - 1;
}

static int cache_insert(struct usdt_cache *c, size_t at, dev_t dev, ino_t ino, bool has_notes)
{
	if (grow_array((void **)&c->files, &c->cap, c->n, sizeof(*c->files), 256))
		return -ENOMEM;
	memmove(&c->files[at + 1], &c->files[at], (c->n - at) * sizeof(*c->files));
	c->files[at] = (struct usdt_file){.dev = dev, .ino = ino, .has_notes = has_notes};
	c->n++;
	return 0;
}

/* elf_scan_sections(): 1 when a .note.stapsdt section holds a note of our provider */
static int step_notes(void *ctx, Elf *e, const GElf_Shdr *sh, const char *name, Elf_Data *d)
{
	size_t off = 0, name_off, desc_off;
	GElf_Nhdr nh;

	(void)ctx, (void)sh;
	if (!name || strcmp(name, ".note.stapsdt"))
		return 0;
	while ((off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
		/* desc: pc, base, semaphore (3 addresses), then "provider\0name\0args\0" */
		size_t addrs = 3 * (gelf_getclass(e) == ELFCLASS32 ? 4 : 8);
		const char *desc = (const char *)d->d_buf + desc_off;

		if (nh.n_type == 3 && nh.n_descsz > addrs + sizeof(PROVIDER) &&
		    !strcmp(desc + addrs, PROVIDER))
			return 1;
	}
	return 0;
}

/*
 * 1 when the ELF file at path carries a USDT note of our provider, 0 when
 * not (or not ELF), -errno when it cannot be opened
 */
static int elf_has_step_notes(const char *path)
{
	int ret = elf_scan_sections(path, ELF_SECTIONS(SHT_NOTE), step_notes, NULL);

	return ret == -ENOEXEC ? 0 : ret;
}

/* 1: the file has our notes, 0: it has not, -errno: it could not be read (not cached) */
static int file_has_notes(struct agent *a, uint32_t pid, dev_t dev, ino_t ino, const char *full)
{
	struct usdt_cache *c = a->usdt;
	long at;
	int ret;

	if (!c) {
		c = calloc(1, sizeof(*c));
		if (!c)
			return -ENOMEM;
		a->usdt = c;
	}
	at = cache_find(c, dev, ino);
	if (at >= 0)
		return c->files[at].has_notes;
	ret = elf_has_step_notes(full);
	if (ret < 0) {
		/* the process may have gone, or the file been replaced: ask again later */
		pr_debug("pid %u: cannot read %s for USDT notes: %s", pid, full, strerror(-ret));
		return ret;
	}
	a->cnt.usdt_files_read++;
	if (ret)
		a->cnt.usdt_files++;
	/* without memory the file is read again next time: slower, still right */
	cache_insert(c, (size_t)(-at - 1), dev, ino, ret);
	return ret;
}

static bool proc_has_usdt(const struct proc *p)
{
	for (int i = 0; i < p->n_usdt; i++)
		if (p->usdt[i].links[0])
			return true;
	return false;
}

int usdt_on_mapping(struct agent *a, struct proc *p, dev_t dev, ino_t ino, const char *path)
{
	struct bpf_program *progs[USDT_LINKS] = {loader_step_program(a, false),
						 loader_step_program(a, true)};
	static const char *const names[USDT_LINKS] = {"step_begin", "step_end"};
	bool first = !proc_has_usdt(p);
	struct usdt_link *u;
	char full[600];
	int ret;

	for (int i = 0; i < p->n_usdt; i++)
		if (p->usdt[i].dev == dev && p->usdt[i].ino == ino)
			return 0;
	snprintf(full, sizeof(full), "/proc/%u/root%s", p->pid, path);
	ret = file_has_notes(a, p->pid, dev, ino, full);
	if (ret <= 0)
		return ret;

	u = realloc(p->usdt, (p->n_usdt + 1) * sizeof(*u));
	if (!u)
		return -ENOMEM;
	p->usdt = u;
	u = &p->usdt[p->n_usdt++];
	memset(u, 0, sizeof(*u));
	u->dev = dev;
	u->ino = ino;
	for (int i = 0; i < USDT_LINKS; i++) {
		u->links[i] = bpf_program__attach_usdt(progs[i], (pid_t)p->pid, full, PROVIDER,
						       names[i], NULL);
		if (!u->links[i]) {
			ret = -errno;
			a->cnt.usdt_errors++;
			pr_warn("pid %u: cannot attach to the USDT probe %s:%s in %s: %s", p->pid,
				PROVIDER, names[i], path, strerror(-ret));
			/* the entry stays, links all NULL: not retried at every scan */
			for (int j = 0; j < i; j++) {
				bpf_link__destroy(u->links[j]);
				u->links[j] = NULL;
			}
			return ret;
		}
	}
	/* a process counts once, however many files and images it has */
	if (first && !p->usdt_counted) {
		p->usdt_counted = true;
		a->cnt.usdt_procs++;
	}
	pr_info("pid %u: step probes %s:step_begin/step_end attached in %s", p->pid, PROVIDER,
		path);
	return 0;
}

/* the links leave through uprobes.c's reaper: each detach waits in the kernel */
void usdt_detach(struct proc *p)
{
	struct bpf_link **links = NULL;
	int n = 0;

	if (p->n_usdt)
		links = malloc(p->n_usdt * USDT_LINKS * sizeof(*links));
	for (int i = 0; i < p->n_usdt; i++)
		for (int j = 0; j < USDT_LINKS; j++) {
			if (!p->usdt[i].links[j])
				continue;
			if (links)
				links[n++] = p->usdt[i].links[j];
			else
				bpf_link__destroy(p->usdt[i].links[j]); /* no memory: here */
		}
	if (n)
		uprobes_reap_links(links, n);
	else
		free(links);
	free(p->usdt);
	p->usdt = NULL;
	p->n_usdt = 0;
}

void usdt_free(struct agent *a)
{
	struct usdt_cache *c = a->usdt;

	if (!c)
		return;
	free(c->files);
	free(c);
	a->usdt = NULL;
}
