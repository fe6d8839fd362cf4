build/bpf/cuda.bpf.o: bpf/cuda.bpf.c bpf/lib/common.bpf.h bpf/maps.bpf.h \
  bpf/vmlinux/x86/vmlinux.h bpf/events.h

bpf/lib/common.bpf.h:

bpf/maps.bpf.h:

bpf/vmlinux/x86/vmlinux.h:

bpf/events.h:
