// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* elfscan.c - see elfscan.h. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <unistd.h>
#include <libelf.h>

#include "elfscan.h"

int elf_scan_sections(const char *path, uint32_t types, elf_section_fn fn, void *ctx)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	bool names;
	int fd, ret = 0;
	Elf *e;

	if (elf_version(EV_CURRENT) == EV_NONE)
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	e = elf_begin(fd, ELF_C_READ, NULL);
	if (!e || elf_kind(e) != ELF_K_ELF) {
		ret = -ENOEXEC;
		goto cleanup;
	}
	names = !elf_getshdrstrndx(e, &shstrndx);
	while (!ret && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type >= 32 || !(types & (1u << sh.sh_type)))
			continue;
		data = elf_getdata(scn, NULL);
		if (!data)
			continue;
		ret = fn(ctx, e, &sh, names ? elf_strptr(e, shstrndx, sh.sh_name) : NULL, data);
	}
cleanup:
	if (e)
		elf_end(e);
	close(fd);
	return ret;
}

struct funcs {
	elf_func_fn fn;
	void *ctx;
};

static int each_func(void *ctx, Elf *e, const GElf_Shdr *sh, const char *sname, Elf_Data *data)
{
	struct funcs *f = ctx;

	(void)sname;
	if (!sh->sh_entsize)
		return 0;
	for (size_t i = 0; i < sh->sh_size / sh->sh_entsize; i++) {
		GElf_Sym sym;
		const char *name;

		if (!gelf_getsym(data, i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
		    sym.st_shndx == SHN_UNDEF)
			continue;
		name = elf_strptr(e, sh->sh_link, sym.st_name);
		if (name)
			f->fn(f->ctx, name);
	}
	return 0;
}

int elf_scan_funcs(const char *path, elf_func_fn fn, void *ctx)
{
	struct funcs f = {fn, ctx};

	return elf_scan_sections(path, ELF_SECTIONS(SHT_DYNSYM) | ELF_SECTIONS(SHT_SYMTAB),
				 each_func, &f);
}
