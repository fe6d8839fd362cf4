// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * python_layout - agent/sources/python_layout.h against CPython's own
 * headers: compiled by tests/integration/python.sh once per CPython whose
 * headers it finds (cc -DPy_BUILD_CORE -I<include> -I<include>/internal),
 * it prints "ok 3.X" when every offset the agent uses for that version is
 * the compiler's, else each difference, and exits 1.
 */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#if PY_VERSION_HEX >= 0x030b0000
#include "internal/pycore_frame.h"
#include "internal/pycore_code.h"
#else
#include "frameobject.h"
#endif

#include "../../agent/sources/python_layout.h"

static int bad;

static void check(const char *what, unsigned long ours, unsigned long theirs)
{
	if (ours != theirs) {
		printf("differs %s: python_layout.h %lu, CPython %lu\n", what, ours, theirs);
		bad = 1;
	}
}

static unsigned state_bits(int kind, int compact, int ascii)
{
	PyASCIIObject u;
	unsigned st = 0;

	memset(&u, 0, sizeof(u));
	u.state.kind = kind;
	u.state.compact = compact;
	u.state.ascii = ascii;
	memcpy(&st, &u.state, sizeof(st));
	return st;
}

int main(void)
{
	const struct py_layout *l = py_layout_of(PY_MAJOR_VERSION, PY_MINOR_VERSION);

	if (!l) {
		printf("no layout for %d.%d\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);
		return 1;
	}
	check("runtime_interp_head", l->runtime_interp_head,
	      offsetof(_PyRuntimeState, interpreters.head));
	check("tstate_next", l->tstate_next, offsetof(PyThreadState, next));
#if PY_VERSION_HEX < 0x030b0000
	check("interp_threads_head", l->interp_threads_head,
	      offsetof(PyInterpreterState, tstate_head));
	check("tstate_native_tid (thread_id)", l->tstate_native_tid,
	      offsetof(PyThreadState, thread_id));
	check("tid_is_pthread", l->tid_is_pthread, 1);
	check("tstate_frame", l->tstate_frame, offsetof(PyThreadState, frame));
	check("cframe_frame", l->cframe_frame, PY_LAYOUT_NONE);
	check("frame_code", l->frame_code, offsetof(PyFrameObject, f_code));
	check("frame_previous", l->frame_previous, offsetof(PyFrameObject, f_back));
	check("frame_owner", l->frame_owner, PY_LAYOUT_NONE);
	check("owner_cstack", l->owner_cstack, 0xff);
	check("code_qualname (co_name)", l->code_qualname, offsetof(PyCodeObject, co_name));
#else
	check("interp_threads_head", l->interp_threads_head,
	      offsetof(PyInterpreterState, threads.head));
	check("tstate_native_tid", l->tstate_native_tid, offsetof(PyThreadState, native_thread_id));
	check("tid_is_pthread", l->tid_is_pthread, 0);
	check("code_qualname", l->code_qualname, offsetof(PyCodeObject, co_qualname));
#endif
#if PY_VERSION_HEX >= 0x030d0000
	check("tstate_frame", l->tstate_frame, offsetof(PyThreadState, current_frame));
	check("cframe_frame", l->cframe_frame, PY_LAYOUT_NONE);
	check("frame_code", l->frame_code, offsetof(_PyInterpreterFrame, f_executable));
#elif PY_VERSION_HEX >= 0x030b0000
	check("tstate_frame", l->tstate_frame, offsetof(PyThreadState, cframe));
	check("cframe_frame", l->cframe_frame, offsetof(_PyCFrame, current_frame));
	check("frame_code", l->frame_code, offsetof(_PyInterpreterFrame, f_code));
#endif
#if PY_VERSION_HEX >= 0x030b0000
	check("frame_previous", l->frame_previous, offsetof(_PyInterpreterFrame, previous));
	check("frame_owner", l->frame_owner, offsetof(_PyInterpreterFrame, owner));
#endif
#if PY_VERSION_HEX >= 0x030c0000
	check("owner_cstack", l->owner_cstack, FRAME_OWNED_BY_CSTACK);
#elif PY_VERSION_HEX >= 0x030b0000
	check("owner_cstack", l->owner_cstack, 0xff);
#endif
#if PY_VERSION_HEX >= 0x030d0000
	check("frame_instr", l->frame_instr, offsetof(_PyInterpreterFrame, instr_ptr));
#elif PY_VERSION_HEX >= 0x030b0000
	check("frame_instr", l->frame_instr, offsetof(_PyInterpreterFrame, prev_instr));
#else
	check("frame_instr (f_lasti)", l->frame_instr, offsetof(PyFrameObject, f_lasti));
#endif
#if PY_VERSION_HEX >= 0x030b0000
	check("code_code", l->code_code, offsetof(PyCodeObject, co_code_adaptive));
	check("lines", l->lines, PY_LINES_657);
#else
	check("code_code", l->code_code, 0);
	check("lines", l->lines, PY_LINES_626);
#endif
	check("code_linetable", l->code_linetable, offsetof(PyCodeObject, co_linetable));
	check("bytes_size", l->bytes_size, offsetof(PyVarObject, ob_size));
	check("bytes_data", l->bytes_data, offsetof(PyBytesObject, ob_sval));
	check("code_filename", l->code_filename, offsetof(PyCodeObject, co_filename));
	check("code_name", l->code_name, offsetof(PyCodeObject, co_name));
	check("code_firstlineno", l->code_firstlineno, offsetof(PyCodeObject, co_firstlineno));
	check("str_length", l->str_length, offsetof(PyASCIIObject, length));
	check("str_state", l->str_state, offsetof(PyASCIIObject, state));
	check("str_ascii_size", l->str_ascii_size, sizeof(PyASCIIObject));
	check("str_compact_size", l->str_compact_size, sizeof(PyCompactUnicodeObject));
	check("state kind bits", 7u << 2, state_bits(7, 0, 0));
	check("state compact bit", 1u << 5, state_bits(0, 1, 0));
	check("state ascii bit", 1u << 6, state_bits(0, 0, 1));
	if (!bad)
		printf("ok %d.%d\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);
	return bad;
}
