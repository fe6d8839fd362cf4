/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * elfscan.h - one way to open an ELF file and walk what it declares, for the
 * CUDA uprobes (uprobes.c: which entry points a library defines) and the
 * step probes (usdt.c: whether a file carries our USDT notes). libelf, read
 * only; the file is closed before the scan returns.
 */
#ifndef INFERTRACE_ELFSCAN_H
#define INFERTRACE_ELFSCAN_H

#include <stdint.h>
#include <gelf.h>

/*
 * Called for each section of a wanted type: its header, its name (NULL
 * when the file has no section-name table) and its data (never NULL).
 * 0 goes on; any other value ends the scan, which returns it.
 */
typedef int (*elf_section_fn)(void *ctx, Elf *e, const GElf_Shdr *sh, const char *name,
			      Elf_Data *data);

/* a defined function symbol (.dynsym or .symtab; versioned ones read "sym@@VER") */
typedef void (*elf_func_fn)(void *ctx, const char *name);

/* a bit per wanted section type: ELF_SECTIONS(SHT_DYNSYM) | ELF_SECTIONS(SHT_SYMTAB) */
#define ELF_SECTIONS(sht) (1u << (sht))

/*
 * fn for each section of path whose type is in types. Returns fn's first
 * nonzero value, 0 when every section was seen, -ENOEXEC when path is not
 * an ELF file, -errno when it cannot be opened.
 */
int elf_scan_sections(const char *path, uint32_t types, elf_section_fn fn, void *ctx);

/* fn for each defined function symbol of path; 0 or as elf_scan_sections() */
int elf_scan_funcs(const char *path, elf_func_fn fn, void *ctx);

#endif /* INFERTRACE_ELFSCAN_H */
