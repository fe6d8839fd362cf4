// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * usdt.c - the step probes of include/infertrace/step.h in traced processes
 * (bpf/usdt.bpf.c). When a process starts being traced, its executable is
 * looked at once: if it carries USDT notes of provider "infertrace", the two
 * programs are attached to it for that pid (libbpf finds the probe sites,
 * the argument locations and the semaphores, which the kernel then counts up
 * so the engine evaluates the arguments). The links go with the process.
 *
 * Only the executable: a native engine links step.h into its binary. A
 * probe in a shared library is not looked for (scanning every mapped file
 * of every traced process is the cost this avoids).
 */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>

#include "state.h"
#include "infertrace.skel.h"

#define PROVIDER "infertrace"

/* does the ELF file at path carry a USDT note of our provider? */
static bool has_step_notes(const char *path)
{
	bool found = false;
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	Elf *e;
	int fd;

	if (elf_version(EV_CURRENT) == EV_NONE)
		return false;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	e = elf_begin(fd, ELF_C_READ, NULL);
	if (!e || elf_kind(e) != ELF_K_ELF || elf_getshdrstrndx(e, &shstrndx)) {
		if (e)
			elf_end(e);
		close(fd);
		return false;
	}
	while (!found && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		GElf_Nhdr nh;
		Elf_Data *d;
		size_t off = 0, name_off, desc_off;
		const char *name;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		name = elf_strptr(e, shstrndx, sh.sh_name);
		if (!name || strcmp(name, ".note.stapsdt"))
			continue;
		d = elf_getdata(scn, NULL);
		while (d && (off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
			/* desc: pc, base, semaphore (3 addresses), then "provider\0name\0args\0" */
			size_t addrs = 3 * (gelf_getclass(e) == ELFCLASS32 ? 4 : 8);
			const char *desc = (const char *)d->d_buf + desc_off;

			if (nh.n_type == 3 && nh.n_descsz > addrs + sizeof(PROVIDER) &&
			    !strcmp(desc + addrs, PROVIDER)) {
				found = true;
				break;
			}
		}
	}
	elf_end(e);
	close(fd);
	return found;
}

void usdt_attach(struct agent *a, struct proc *p)
{
	struct bpf_program *progs[USDT_LINKS] = { a->skel->progs.infertrace_step_begin,
						  a->skel->progs.infertrace_step_end };
	static const char *const names[USDT_LINKS] = { "step_begin", "step_end" };
	char exe[64];

	snprintf(exe, sizeof(exe), "/proc/%u/exe", p->pid);
	if (!has_step_notes(exe))
		return;
	for (int i = 0; i < USDT_LINKS; i++) {
		p->usdt[i] = bpf_program__attach_usdt(progs[i], (pid_t)p->pid, exe, PROVIDER,
						      names[i], NULL);
		if (!p->usdt[i]) {
			a->cnt.usdt_errors++;
			pr_warn("pid %u: cannot attach to the USDT probe %s:%s of its executable: %s",
				p->pid, PROVIDER, names[i], strerror(errno));
			usdt_detach(p);
			return;
		}
	}
	a->cnt.usdt_procs++;
	pr_info("pid %u: step probes %s:step_begin/step_end attached", p->pid, PROVIDER);
}

void usdt_detach(struct proc *p)
{
	for (int i = 0; i < USDT_LINKS; i++) {
		bpf_link__destroy(p->usdt[i]);
		p->usdt[i] = NULL;
	}
}
