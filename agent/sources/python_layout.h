/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * python_layout.h - where CPython keeps what the frame walk reads, per
 * version (agent/sources/python.c fills struct py_proc from it for
 * bpf/python.bpf.c, and reads code objects and strings with it).
 *
 * The numbers are offsetof()/sizeof() of CPython's own structures for
 * x86_64, from its headers (Include/internal/pycore_runtime.h,
 * pycore_interp.h, pycore_frame.h, cpython/pystate.h, cpython/code.h,
 * cpython/unicodeobject.h of each release): _PyRuntimeState.interpreters.head,
 * PyInterpreterState.threads.head, PyThreadState.next / .native_thread_id /
 * .cframe (3.11, 3.12) or .current_frame (3.13), _PyCFrame.current_frame,
 * _PyInterpreterFrame.f_code (.f_executable in 3.13) / .previous / .owner,
 * PyCodeObject.co_filename / co_name / co_qualname / co_firstlineno,
 * PyASCIIObject.length / .state, sizeof(PyASCIIObject) and
 * sizeof(PyCompactUnicodeObject) (where a compact string's characters
 * start). 3.10 has none of the frame structures of 3.11: its threads are
 * PyInterpreterState.tstate_head, named by PyThreadState.thread_id
 * (pthread_self(), no native id), its frames PyFrameObject (.f_code,
 * .f_back) from PyThreadState.frame, its code objects no co_qualname
 * (co_name stands in). Lines: the frame's instruction (_PyInterpreterFrame
 * .prev_instr, .instr_ptr in 3.13, PyFrameObject.f_lasti in 3.10), where
 * the instructions start (PyCodeObject.co_code_adaptive, 3.11+), the line
 * table (co_linetable, a PyBytesObject: ob_size, ob_sval).
 * tests/integration/python_layout.c compiles against
 * every CPython whose headers it finds (Debian's 3.11; pyenv's 3.10-3.13
 * where present) and fails on any difference (tests/integration/python.sh).
 * Versions before 3.10 and after 3.13 are not walked: the agent says so
 * once per process and counts it.
 */
#ifndef INFERTRACE_PYTHON_LAYOUT_H
#define INFERTRACE_PYTHON_LAYOUT_H

#include <stdint.h>

#define PY_LAYOUT_NONE 0xffff

struct py_layout {
	uint32_t version; /* (major << 8) | minor: 0x30b is 3.11 */
	uint16_t runtime_interp_head, interp_threads_head;
	uint16_t tstate_next, tstate_native_tid, tstate_frame, cframe_frame;
	uint16_t frame_code, frame_previous, frame_owner;
	uint8_t owner_cstack;	/* 0xff: none (3.10, 3.11) */
	uint8_t tid_is_pthread; /* 3.10: tstate_native_tid is thread_id, pthread_self() */
	uint16_t code_filename, code_name, code_qualname, code_firstlineno;
	uint16_t str_length, str_state, str_ascii_size, str_compact_size;
	/*
	 * lines: the frame's instruction (frame_instr: prev_instr, instr_ptr, or
	 * 3.10's f_lasti), where the code's instructions start
	 * (co_code_adaptive, 3.11+) and its line table (co_linetable, a bytes
	 * object: its size at bytes_size, its data at bytes_data), in
	 * PEP 626's form (3.10) or PEP 657's location table (3.11+)
	 */
	uint16_t frame_instr, code_code, code_linetable, bytes_size, bytes_data;
	uint8_t lines; /* PY_LINES_* */
};

enum {
	PY_LINES_626 = 1, /* 3.10: (byte delta, line delta) pairs; f_lasti in code units */
	PY_LINES_657 = 2, /* 3.11+: the location table; an instruction pointer */
};

/*
 * PyASCIIObject.state's bits (the same in 3.11-3.13): kind (1, 2 or 4
 * bytes a character) in bits 2-4, compact bit 5, ascii bit 6
 */
#define PY_STR_KIND(state) (((state) >> 2) & 7)
#define PY_STR_COMPACT(state) (((state) >> 5) & 1)
#define PY_STR_ASCII(state) (((state) >> 6) & 1)

static const struct py_layout py_layouts[] = {
    /* 3.10: checked against 3.10.13; frames are PyFrameObject, no owner, no qualname */
    {.version = 0x30a,
     .runtime_interp_head = 32,
     .interp_threads_head = 8,
     .tstate_next = 8,
     .tstate_native_tid = 176,
     .tid_is_pthread = 1,
     .tstate_frame = 24,
     .cframe_frame = PY_LAYOUT_NONE,
     .frame_code = 32,
     .frame_previous = 24,
     .frame_owner = PY_LAYOUT_NONE,
     .owner_cstack = 0xff,
     .code_filename = 104,
     .code_name = 112,
     .code_qualname = 112,
     .code_firstlineno = 40,
     .str_length = 16,
     .str_state = 32,
     .str_ascii_size = 48,
     .str_compact_size = 72,
     .frame_instr = 96,
     .code_code = 0,
     .code_linetable = 120,
     .bytes_size = 16,
     .bytes_data = 32,
     .lines = PY_LINES_626},
    /* 3.11: checked against 3.11.2 (Debian 12) and 3.11.7 */
    {.version = 0x30b,
     .runtime_interp_head = 40,
     .interp_threads_head = 16,
     .tstate_next = 8,
     .tstate_native_tid = 160,
     .tstate_frame = 56,
     .cframe_frame = 8,
     .frame_code = 32,
     .frame_previous = 48,
     .frame_owner = 69,
     .owner_cstack = 0xff,
     .code_filename = 112,
     .code_name = 120,
     .code_qualname = 128,
     .code_firstlineno = 72,
     .str_length = 16,
     .str_state = 32,
     .str_ascii_size = 48,
     .str_compact_size = 72,
     .frame_instr = 56,
     .code_code = 184,
     .code_linetable = 136,
     .bytes_size = 16,
     .bytes_data = 32,
     .lines = PY_LINES_657},
    /* 3.12: checked against 3.12.1 */
    {.version = 0x30c,
     .runtime_interp_head = 40,
     .interp_threads_head = 72,
     .tstate_next = 8,
     .tstate_native_tid = 144,
     .tstate_frame = 56,
     .cframe_frame = 0,
     .frame_code = 0,
     .frame_previous = 8,
     .frame_owner = 70,
     .owner_cstack = 3,
     .code_filename = 112,
     .code_name = 120,
     .code_qualname = 128,
     .code_firstlineno = 68,
     .str_length = 16,
     .str_state = 32,
     .str_ascii_size = 40,
     .str_compact_size = 56,
     .frame_instr = 56,
     .code_code = 192,
     .code_linetable = 136,
     .bytes_size = 16,
     .bytes_data = 32,
     .lines = PY_LINES_657},
    /* 3.13: checked against 3.13.0 */
    {.version = 0x30d,
     .runtime_interp_head = 632,
     .interp_threads_head = 7344,
     .tstate_next = 8,
     .tstate_native_tid = 160,
     .tstate_frame = 72,
     .cframe_frame = PY_LAYOUT_NONE,
     .frame_code = 0,
     .frame_previous = 8,
     .frame_owner = 70,
     .owner_cstack = 3,
     .code_filename = 112,
     .code_name = 120,
     .code_qualname = 128,
     .code_firstlineno = 68,
     .str_length = 16,
     .str_state = 32,
     .str_ascii_size = 40,
     .str_compact_size = 56,
     .frame_instr = 56,
     .code_code = 200,
     .code_linetable = 136,
     .bytes_size = 16,
     .bytes_data = 32,
     .lines = PY_LINES_657},
};

static inline const struct py_layout *py_layout_of(uint32_t major, uint32_t minor)
{
	for (unsigned i = 0; i < sizeof(py_layouts) / sizeof(py_layouts[0]); i++)
		if (py_layouts[i].version == (major << 8 | minor))
			return &py_layouts[i];
	return 0;
}

#endif /* INFERTRACE_PYTHON_LAYOUT_H */
