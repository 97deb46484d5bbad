/* cuda_emu: the runtime (memory, streams, graphs), the block scheduler and SGEMM on the CPU.
 * See cuda_runtime_api.h for what it is for and pk_emu_device.h for the execution model.
 *
 * Streams run their work at once, in order, unless they are recording: then each launch,
 * copy, memset and SGEMM becomes a step of the graph, run again on every cudaGraphLaunch.
 * Device memory is tracked by allocation, so every copy and memset checks that its device
 * side lies inside one, and work recorded into a graph may not touch host memory (a frame is
 * uploaded before its replay; the backend's design keeps transfers out of graphs). On request
 * (pk_device_traffic) it counts the device memory each step reads and writes, and it can hold
 * each block's stores back from the others until the block fences (PK_EMU_HELD_STORES=1), or
 * keep device memory from host code as a GPU does (PK_EMU_HOST_GUARD=1). */
#include "cublas_v2.h"
#include "cuda_runtime.h"
#include "kernels.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

/* Under ASan every stack switch is announced, so it knows which stack is live. */
#if defined(__SANITIZE_ADDRESS__)
#define PK_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PK_EMU_ASAN 1
#endif
#endif
#ifdef PK_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

/* ---- errors ---- */

static cudaError_t last_error = cudaSuccess;

static cudaError_t note(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

/* Undefined behaviour on a GPU: no error code to return, so the run stops here. */
[[noreturn]] static void fatal(const char *what) {
    fprintf(stderr, "cuda_emu: %s\n", what);
    abort();
}

/* ---- test hooks (cuda_runtime_api.h) ---- */

static long fail_countdown[PK_EMU_CALLS]; /* calls of each kind until the chosen one; 0: none chosen */
static long live_objects;

/* Whether this call is the one pk_emu_fail_nth chose to fail. */
static bool injected(enum pk_emu_call call) { return fail_countdown[call] && --fail_countdown[call] == 0; }

extern "C" void pk_emu_fail_nth(enum pk_emu_call call, long nth) {
    if ((unsigned)call < PK_EMU_CALLS) fail_countdown[call] = nth > 0 ? nth : 0;
}

extern "C" long pk_emu_fail_pending(enum pk_emu_call call) {
    return (unsigned)call < PK_EMU_CALLS ? fail_countdown[call] : 0;
}

extern "C" long pk_emu_live_objects(void) { return live_objects; }

extern "C" const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorGraphExecUpdateFailure: return "the graph update was not performed";
    default: return "unknown error";
    }
}

extern "C" cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

/* ---- device ---- */

static const size_t emu_total_bytes = (size_t)16 << 30;

static int emu_integrated(void) {
    const char *v = getenv("PK_EMU_INTEGRATED");
    return v && strcmp(v, "1") == 0;
}

extern "C" cudaError_t cudaGetDeviceCount(int *count) {
    *count = 1;
    return cudaSuccess;
}

extern "C" cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : note(cudaErrorInvalidDevice); }

/* The SMs the device reports: 1, or PK_EMU_SMS=N (1..1024), so launchers that size their tiles
 * to the SMs (gemv.cu's launch_imma) take the choices of a larger device. */
static int emu_sms(void) {
    const char *v = getenv("PK_EMU_SMS");
    const int n = v ? atoi(v) : 1;
    return n >= 1 && n <= 1024 ? n : 1;
}

extern "C" cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (device != 0) return note(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "cuda_emu (CPU emulation)");
    prop->totalGlobalMem = emu_total_bytes;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = emu_sms();
    prop->integrated = emu_integrated();
    return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    if (device != 0) return note(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrIntegrated:
    case cudaDevAttrCanUseHostPointerForRegisteredMem: *value = emu_integrated(); return cudaSuccess;
    case cudaDevAttrHostRegisterReadOnlySupported: *value = 1; return cudaSuccess;
    }
    return note(cudaErrorInvalidValue);
}

/* ---- memory ---- */

struct region {
    size_t bytes;
    bool device;
    bool registered; /* host memory the device reads in place (cudaHostRegister) */
    bool paged;      /* whole pages that on_fault watches (allocated while counting or holding stores) */
    bool counted;    /* pages whose traffic is counted (allocated while counting) */
};
static std::map<uintptr_t, region> regions; /* start -> allocation */
static size_t device_bytes;

/* The allocation holding [p, p + bytes), or NULL. */
static const region *find_region(const void *p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    auto it = regions.upper_bound(a);
    if (it == regions.begin()) return NULL;
    --it;
    if (a - it->first > it->second.bytes || bytes > it->second.bytes - (a - it->first)) return NULL;
    return &it->second;
}

static bool on_device(const void *p, size_t bytes) {
    const region *r = find_region(p, bytes);
    return r && r->device;
}

static cudaError_t emu_alloc(void **ptr, size_t bytes, bool device);
static void *paged_alloc(size_t bytes, bool counted);
static void paged_free(void *p, size_t bytes);

extern "C" cudaError_t cudaMalloc(void **ptr, size_t bytes) { return emu_alloc(ptr, bytes, true); }
extern "C" cudaError_t cudaMallocHost(void **ptr, size_t bytes) { return emu_alloc(ptr, bytes, false); }

static cudaError_t emu_free(void *ptr, bool device) {
    if (!ptr) return cudaSuccess;
    auto it = regions.find((uintptr_t)ptr);
    if (it == regions.end() || it->second.device != device || it->second.registered) return note(cudaErrorInvalidValue);
    if (device) device_bytes -= it->second.bytes;
    live_objects--;
    if (it->second.paged)
        paged_free(ptr, it->second.bytes);
    else
        free(ptr);
    regions.erase(it);
    return cudaSuccess;
}

extern "C" cudaError_t cudaFree(void *ptr) { return emu_free(ptr, true); }
extern "C" cudaError_t cudaFreeHost(void *ptr) { return emu_free(ptr, false); }

static bool any_capture(void);
static cudaError_t forbidden_in_capture(void);

/* Registered host memory becomes a device region at the same address (as with unified
 * addressing): copies into it are bounds-checked, kernels read it in place, and it costs no
 * device memory. */
extern "C" cudaError_t cudaHostRegister(void *ptr, size_t bytes, unsigned flags) {
    if (!ptr || !bytes || !(flags & cudaHostRegisterMapped)) return note(cudaErrorInvalidValue);
    if (any_capture()) return forbidden_in_capture();
    uintptr_t a = (uintptr_t)ptr;
    auto next = regions.lower_bound(a);
    if (next != regions.end() && next->first < a + bytes) return note(cudaErrorHostMemoryAlreadyRegistered);
    if (next != regions.begin() && std::prev(next)->first + std::prev(next)->second.bytes > a)
        return note(cudaErrorHostMemoryAlreadyRegistered);
    regions[a] = region{bytes, true, true, false, false};
    return cudaSuccess;
}

extern "C" cudaError_t cudaHostUnregister(void *ptr) {
    auto it = regions.find((uintptr_t)ptr);
    if (it == regions.end() || !it->second.registered) return note(cudaErrorHostMemoryNotRegistered);
    regions.erase(it);
    return cudaSuccess;
}

extern "C" cudaError_t cudaHostGetDevicePointer(void **device_ptr, void *host_ptr, unsigned flags) {
    const region *r = find_region(host_ptr, 1);
    if (flags || !r || !r->registered) return note(cudaErrorInvalidValue);
    *device_ptr = host_ptr;
    return cudaSuccess;
}

extern "C" cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr) {
    const region *r = find_region(ptr, 1);
    attr->type = !r                            ? cudaMemoryTypeUnregistered
                 : r->device && !r->registered ? cudaMemoryTypeDevice
                                               : cudaMemoryTypeHost;
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    *total_bytes = emu_total_bytes;
    *free_bytes = emu_total_bytes - device_bytes;
    return cudaSuccess;
}

/* ---- paged device memory: traffic counting and held stores ----
 * Both watch the device memory kernels touch, so while either is on a device allocation is a
 * mapping of whole pages that stays closed (inaccessible while counting, else read-only) except
 * for the pages the running step has opened: on_fault opens a page on its first write, or on
 * its first read where reads fault, and before the next step every opened page is closed again.
 * Off (the default), allocations stay heap blocks that ASan guards and a step costs one test.
 *
 * Traffic (pk_device_traffic): off until the first call, then counted in the memory allocated
 * from then on. A step's first read of a page counts the page as read, its first write as
 * written (a page written before it is read counts as written only, and so does one first
 * touched by an x86 read-modify-write instruction: its fault reports a write). Each step counts
 * afresh, also when a graph replays it. A page counts its bytes up to its allocation's end: the
 * granularity is the page (a GPU moves 32-byte sectors, so small scattered accesses count
 * high). Not counted: memory allocated before counting began, pinned host memory and
 * registered host memory (cudaHostRegister).
 *
 * Held stores: blocks run one after another, so a block that merges the others' partial results
 * would see them even where the device, for want of a __threadfence, may not. A launch that
 * holds stores keeps each block's stores to device memory from the blocks after it until the
 * block executes __threadfence (which publishes everything the block stored so far); the rest
 * land when the launch ends, block by block. Atomics are never held, and a block reads its own
 * stores. A block's first write to a page saves the page's bytes (its pre-image) and opens it;
 * a fence makes the pages' bytes their pre-images; at the block's end each byte that differs
 * from its pre-image is set aside and the pre-image's byte put back, and the pages the block
 * left unchanged are write-protected again (the others stay open, their pre-images still
 * right, as the next block likely writes them too); at the launch's end the set-aside bytes are
 * written. An atomic writes its result into the pre-image too, so it is never undone. With
 * PK_EMU_HELD_STORES=1 in the environment (read at the first allocation: device allocations are
 * pages from then on) every launch of more than one block holds stores; without it none does
 * (ctest runs the self-test and the parity test both ways).
 *
 * Host guard: a GPU's memory is not the host's, so host code that reads or writes it through a
 * pointer (a result "downloaded" without cudaMemcpy) dies there with SIGSEGV, while here, where
 * device memory is host memory, it would read the right bytes. With PK_EMU_HOST_GUARD=1 in the
 * environment (read at the first allocation) device allocations are pages closed to every
 * access between steps: such code dies here too, after a line naming the allocation. */

struct step_traffic {
    const char *name;
    uint64_t read, written;
};

static bool paging;                             /* on_fault is installed; device allocations are pages */
static bool guarding;                           /* PK_EMU_HOST_GUARD=1: closed to the host between steps */
static bool in_step;                            /* a step is running: its accesses are the device's */
static bool counting;
static size_t page;
static struct sigaction chained;                /* SIGSEGV's action before paging began */
static std::vector<uintptr_t> opened;           /* counted pages opened since the running step began */
static std::vector<uintptr_t> opened_uncounted; /* uncounted ones (held stores only), closed read-only */
static std::set<uintptr_t> rewritten;           /* counted pages the step wrote that a hold protected again */
static const char *step_name;                   /* the running step's, NULL between steps */
static uint64_t step_read, step_written;        /* its bytes so far */
static std::vector<step_traffic> traffic;       /* steps run since the last pk_device_traffic */

enum { MAX_HELD = 1 << 16 }; /* pages held at once */
struct set_aside_run {
    uintptr_t at;
    size_t bytes, offset; /* in set_aside_bytes */
};
static bool holding;                               /* the running launch holds stores */
static std::vector<uintptr_t> held;                /* open pages of the launch (capacity MAX_HELD) */
static unsigned char *pre_images;                  /* [MAX_HELD][page]: held[i]'s bytes as other blocks see them */
static std::vector<set_aside_run> set_aside;       /* the launch's held stores so far, in block order */
static std::vector<unsigned char> set_aside_bytes; /* their bytes */

static size_t mapped_bytes(size_t bytes) { return ((bytes ? bytes : 1) + page - 1) & ~(page - 1); }

/* One call per run of adjacent pages; the list (any order, repeats allowed) is left sorted
 * without repeats. */
static void protect(std::vector<uintptr_t> &pages, int prot) {
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    for (size_t i = 0, j; i < pages.size(); i = j) {
        for (j = i + 1; j < pages.size() && pages[j] == pages[j - 1] + page;) j++;
        if (mprotect((void *)pages[i], (j - i) * page, prot)) fatal("cannot protect device pages");
    }
}

/* Filled with garbage, as emu_alloc's blocks are, before it is closed. */
static void *paged_alloc(size_t bytes, bool counted) {
    size_t n = mapped_bytes(bytes);
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    memset(p, 0xff, n);
    if (mprotect(p, n, counted || guarding ? PROT_NONE : PROT_READ)) fatal("cannot protect paged device memory");
    return p;
}

static void close_opened(void) {
    protect(opened, PROT_NONE);
    protect(opened_uncounted, guarding ? PROT_NONE : PROT_READ);
    opened.clear();
    opened_uncounted.clear();
    rewritten.clear();
}

/* Its pages are closed first: an opened page must not outlive its mapping (the address may
 * come back as someone else's). */
static void paged_free(void *p, size_t bytes) {
    close_opened();
    munmap(p, mapped_bytes(bytes));
}

/* on_fault, for a write to page p, which is not held: into storage reserved beforehand, as a
 * signal handler should. */
static void hold(uintptr_t p) {
    if (held.size() == MAX_HELD) fatal("more device pages held at once than held stores can keep");
    memcpy(pre_images + held.size() * page, (const void *)p, page);
    held.push_back(p);
}

/* Pages no longer held: write-protected again, so that a block's next write to one holds it
 * afresh (without counting it twice). */
static void unhold(std::vector<uintptr_t> &pages) {
    if (counting) rewritten.insert(pages.begin(), pages.end());
    protect(pages, PROT_READ);
}

/* __threadfence: what the running block stored so far becomes visible. Its pages stay held
 * with their bytes as new pre-images (cheaper than protecting them again: every thread of a
 * block may fence, each after its own stores). */
static void publish_held(void) {
    for (size_t i = 0; i < held.size(); i++) memcpy(pre_images + i * page, (const void *)held[i], page);
}

/* At a holding block's end: what it stored and never fenced is set aside and undone. A page it
 * changed holds its pre-image's bytes again and stays held, open, for the next block (which
 * likely writes it too: that saves a fault and two system calls a block); the rest are
 * unheld. */
static void set_aside_held(void) {
    static std::vector<uintptr_t> unchanged;
    size_t kept = 0;
    for (size_t i = 0; i < held.size(); i++) {
        unsigned char *live = (unsigned char *)held[i], *pre = pre_images + i * page;
        if (!memcmp(live, pre, page)) {
            unchanged.push_back(held[i]);
            continue;
        }
        for (size_t s = 0, e; s < page; s = e) {
            if (live[s] == pre[s]) {
                e = s + 1;
                continue;
            }
            for (e = s + 1; e < page && live[e] != pre[e];) e++;
            set_aside.push_back(set_aside_run{held[i] + s, e - s, set_aside_bytes.size()});
            set_aside_bytes.insert(set_aside_bytes.end(), live + s, live + e);
            memcpy(live + s, pre + s, e - s);
        }
        if (kept != i) memcpy(pre_images + kept * page, pre, page);
        held[kept++] = held[i];
    }
    held.resize(kept);
    unhold(unchanged);
    unchanged.clear();
}

/* At a holding launch's end its blocks' held stores land, in block order. Their pages were all
 * opened in this step, so the next step closes them. */
static void land_set_aside(void) {
    std::vector<uintptr_t> pages;
    for (const set_aside_run &r : set_aside) pages.push_back(r.at & ~(uintptr_t)(page - 1));
    protect(pages, PROT_READ | PROT_WRITE);
    for (const set_aside_run &r : set_aside) memcpy((void *)r.at, &set_aside_bytes[r.offset], r.bytes);
    unhold(pages);
    set_aside.clear();
    set_aside_bytes.clear();
}

/* A fault in paged memory opens its page (counted, and held where the launch holds stores); any
 * other goes where it went before paging began (ASan's report, or the default action: the
 * access faults again and ends the process). Host code touching paged memory between steps
 * opens pages uncounted. It runs only for faults on device memory, never inside the
 * emulation's own bookkeeping, so reading `regions` here is safe. */
static void on_fault(int sig, siginfo_t *info, void *context) {
    uintptr_t a = (uintptr_t)info->si_addr;
    auto it = regions.upper_bound(a);
    if (it != regions.begin() && (--it)->second.paged && a - it->first < mapped_bytes(it->second.bytes)) {
        const region &r = it->second;
        if (guarding && !in_step) { /* the host's own access: on a GPU it faults */
            char line[200];
            int n = snprintf(line, sizeof line,
                             "cuda_emu: host code touched device memory at %p, byte %zu of a %zu-byte cudaMalloc "
                             "allocation: on a GPU this access faults (PK_EMU_HOST_GUARD)\n",
                             (void *)a, (size_t)(a - it->first), r.bytes);
            ssize_t written = write(STDERR_FILENO, line, n > 0 ? (size_t)n : 0);
            (void)written; /* dying anyway */
            signal(sig, SIG_DFL); /* the access faults again and ends the process */
            return;
        }
        uintptr_t p = a & ~(uintptr_t)(page - 1);
        /* x86-64: bit 1 of the page fault's error code is set for a write */
        bool write = ((ucontext_t *)context)->uc_mcontext.gregs[REG_ERR] & 2;
        if (mprotect((void *)p, page, write ? PROT_READ | PROT_WRITE : PROT_READ)) fatal("cannot open a device page");
        (r.counted ? opened : opened_uncounted).push_back(p);
        if (write && holding) hold(p);
        if (r.counted && step_name && !(write && rewritten.count(p)))
            (write ? step_written : step_read) += std::min(p + page, it->first + r.bytes) - p;
        return;
    }
    if (chained.sa_flags & SA_SIGINFO)
        chained.sa_sigaction(sig, info, context);
    else if (chained.sa_handler != SIG_DFL && chained.sa_handler != SIG_IGN)
        chained.sa_handler(sig);
    else
        signal(sig, SIG_DFL);
}

/* Installed after ASan's handler (ASan installs its own at start-up), which it chains to; on
 * the alternate signal stack where one is set (ASan sets one, where a fault on an overflowed
 * fiber stack can still be handled), else on the faulting stack. */
static void start_paging(void) {
    if (paging) return;
    page = (size_t)sysconf(_SC_PAGESIZE);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &chained)) fatal("cannot install the paged memory's SIGSEGV handler");
    paging = true;
}

/* PK_EMU_HELD_STORES=1: every launch holds stores. */
static bool hold_all(void) {
    static const bool on = [] {
        const char *v = getenv("PK_EMU_HELD_STORES");
        if (!v || strcmp(v, "1")) return false;
        start_paging();
        return true;
    }();
    return on;
}

/* PK_EMU_HOST_GUARD=1: device memory closed to host code between steps. */
static bool host_guard(void) {
    static const bool on = [] {
        const char *v = getenv("PK_EMU_HOST_GUARD");
        if (!v || strcmp(v, "1")) return false;
        start_paging();
        guarding = true;
        return true;
    }();
    return on;
}

/* The storage hold fills, reserved at the first holding launch (virtual until used). */
static void reserve_holds(void) {
    if (pre_images) return;
    void *p = mmap(NULL, (size_t)MAX_HELD * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) fatal("cannot map the held stores' pre-images");
    pre_images = (unsigned char *)p;
    held.reserve(MAX_HELD);
}

extern "C" int pk_device_traffic(pk_traffic_fn fn, void *arg) {
    start_paging();
    counting = true;
    if (fn)
        for (const step_traffic &t : traffic) fn(arg, t.name, t.read, t.written);
    traffic.clear();
    return 0;
}

/* ---- streams and graphs ---- */

/* One piece of stream work: kernel, copy, memset or SGEMM; the name is what traffic is counted
 * under (a kernel's launch expression). */
struct step {
    enum kind_t { KERNEL, COPY, SET, GEMM } kind;
    const char *name;
    std::function<cudaError_t()> run;
};

static cudaError_t run_step(const step &s) {
    if (!paging) return s.run();
    close_opened();
    if (counting) {
        step_name = s.name;
        step_read = step_written = 0;
    }
    in_step = true;
    cudaError_t e = s.run();
    in_step = false;
    if (counting) {
        step_name = NULL;
        traffic.push_back(step_traffic{s.name, step_read, step_written});
    }
    if (guarding) close_opened(); /* nothing stays open to the host */
    return e;
}

struct pk_emu_graph {
    std::vector<step> steps;
};

struct pk_emu_stream {
    pk_emu_graph *recording; /* non-NULL while capturing */
    bool invalidated;        /* a forbidden call happened during the capture */
};

struct pk_emu_event {}; /* work runs when enqueued, so every event is complete */

static std::vector<pk_emu_stream *> capturing_streams;

static bool any_capture(void) { return !capturing_streams.empty(); }

/* A call a capture forbids: it fails and spoils the capture, as on the device. */
static cudaError_t forbidden_in_capture(void) {
    for (pk_emu_stream *s : capturing_streams) s->invalidated = true;
    return note(cudaErrorStreamCaptureUnsupported);
}

static cudaError_t emu_alloc(void **ptr, size_t bytes, bool device) {
    *ptr = NULL;
    if (device && any_capture()) return forbidden_in_capture();
    if (injected(device ? PK_EMU_MALLOC : PK_EMU_MALLOC_HOST) || (device && bytes > emu_total_bytes - device_bytes))
        return note(cudaErrorMemoryAllocation);
    const bool guard = host_guard(); /* read here: the || below skips it once hold_all() is on */
    bool paged = device && (hold_all() || counting || guard), counted = device && counting;
    size_t padded = ((bytes ? bytes : 1) + 255) & ~(size_t)255;
    void *p = paged ? paged_alloc(bytes, counted) : aligned_alloc(256, padded);
    if (!p) return note(cudaErrorMemoryAllocation);
    /* Fresh device memory holds garbage, not zeros: code that relies on it reads NaNs here. */
    if (!paged) memset(p, 0xff, padded);
    regions[(uintptr_t)p] = region{bytes, device, false, paged, counted};
    if (device) device_bytes += bytes;
    live_objects++;
    *ptr = p;
    return cudaSuccess;
}

static cudaError_t enqueue(cudaStream_t s, step::kind_t kind, const char *name, std::function<cudaError_t()> run) {
    step st{kind, name, std::move(run)};
    if (s && s->recording) {
        s->recording->steps.push_back(std::move(st));
        return cudaSuccess;
    }
    if (any_capture()) return forbidden_in_capture(); /* work on another stream during a capture */
    return note(run_step(st));
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                                       cudaStream_t stream) {
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice)
        return note(cudaErrorInvalidValue);
    if (!bytes) return cudaSuccess;
    if ((dst_dev && !on_device(dst, bytes)) || (src_dev && !on_device(src, bytes)) ||
        (!dst_dev && on_device(dst, 1)) || (!src_dev && on_device(src, 1)))
        return note(cudaErrorInvalidValue);
    if (stream && stream->recording && kind != cudaMemcpyDeviceToDevice) {
        fprintf(stderr, "cuda_emu: a host transfer of %zu bytes inside a recorded graph\n", bytes);
        return forbidden_in_capture();
    }
    if (injected(PK_EMU_COPY)) return note(cudaErrorLaunchFailure);
    static const char *const names[] = {"memcpy host to device", "memcpy device to host", "memcpy device to device"};
    return enqueue(stream, step::COPY, names[kind - 1], [dst, src, bytes]() {
        memmove(dst, src, bytes);
        return cudaSuccess;
    });
}

extern "C" cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream) {
    if (!bytes) return cudaSuccess;
    if (!on_device(dst, bytes)) return note(cudaErrorInvalidValue);
    if (injected(PK_EMU_SET)) return note(cudaErrorLaunchFailure);
    return enqueue(stream, step::SET, "memset", [dst, value, bytes]() {
        memset(dst, value, bytes);
        return cudaSuccess;
    });
}

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags) {
    (void)flags;
    *stream = NULL;
    if (injected(PK_EMU_CREATE)) return note(cudaErrorMemoryAllocation);
    *stream = new pk_emu_stream{NULL, false};
    live_objects++;
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (stream && stream->recording) return note(cudaErrorStreamCaptureUnsupported);
    if (stream) live_objects--;
    delete stream;
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (stream && stream->recording) return forbidden_in_capture();
    return injected(PK_EMU_SYNC) ? note(cudaErrorLaunchFailure) : cudaSuccess;
}

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags) {
    (void)flags;
    *event = NULL;
    if (injected(PK_EMU_CREATE)) return note(cudaErrorMemoryAllocation);
    *event = new pk_emu_event;
    live_objects++;
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (event) live_objects--;
    delete event;
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    (void)event;
    (void)stream;
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    (void)event;
    if (any_capture()) return forbidden_in_capture();
    return injected(PK_EMU_SYNC) ? note(cudaErrorLaunchFailure) : cudaSuccess;
}

extern "C" cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
    (void)mode;
    if (!stream || stream->recording) return note(cudaErrorInvalidValue); /* the legacy stream cannot record */
    if (injected(PK_EMU_BEGIN_CAPTURE)) return note(cudaErrorStreamCaptureUnsupported);
    stream->recording = new pk_emu_graph;
    stream->invalidated = false;
    capturing_streams.push_back(stream);
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    *graph = NULL;
    if (!stream || !stream->recording) return note(cudaErrorInvalidValue);
    for (size_t i = 0; i < capturing_streams.size(); i++)
        if (capturing_streams[i] == stream) capturing_streams.erase(capturing_streams.begin() + (long)i);
    pk_emu_graph *g = stream->recording;
    stream->recording = NULL;
    if (stream->invalidated || injected(PK_EMU_END_CAPTURE)) {
        delete g;
        return note(cudaErrorStreamCaptureInvalidated);
    }
    *graph = g;
    live_objects++;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    if (graph) live_objects--;
    delete graph;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    (void)flags;
    *exec = NULL;
    if (!graph) return note(cudaErrorInvalidValue);
    if (injected(PK_EMU_INSTANTIATE)) return note(cudaErrorMemoryAllocation);
    *exec = new pk_emu_graph(*graph);
    live_objects++;
    return cudaSuccess;
}

/* Succeeds only when the new graph has the same steps of the same kinds (a simplification of
 * the device's rule, which also compares each launch's kernel). */
extern "C" cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                                           cudaGraphExecUpdateResultInfo *info) {
    if (info) memset(info, 0, sizeof *info);
    if (!exec || !graph) return note(cudaErrorInvalidValue);
    bool same = exec->steps.size() == graph->steps.size();
    for (size_t i = 0; same && i < graph->steps.size(); i++) same = exec->steps[i].kind == graph->steps[i].kind;
    if (!same) return note(cudaErrorGraphExecUpdateFailure);
    exec->steps = graph->steps;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    if (exec) live_objects--;
    delete exec;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    if (!exec) return note(cudaErrorInvalidValue);
    if (any_capture()) return forbidden_in_capture();
    if (injected(PK_EMU_GRAPH_LAUNCH)) return note(cudaErrorLaunchFailure);
    (void)stream;
    for (const step &s : exec->steps) {
        cudaError_t e = run_step(s);
        if (e) return note(e);
    }
    return cudaSuccess;
}

/* ---- the block scheduler ---- */

namespace pk_emu {

launch_dims dims;

/* ---- fibers ---- */

enum fiber_state { READY, RUNNING, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };

struct fiber {
    void *sp; /* saved stack pointer while switched out */
    uint3 idx;
    int index, lane, warp;
    fiber_state state;
    unsigned shuffles; /* exchanges done, for the double-buffered slots */
    unsigned shuffle_mask;
    char *stack;
#ifdef PK_EMU_ASAN
    void *fake_stack;
#endif
};

enum { MAX_THREADS = 1024, WARP = 32, MAX_WARPS = MAX_THREADS / WARP };
static const size_t stack_bytes = (size_t)256 << 10, guard_bytes = 4096;

static fiber fibers[MAX_THREADS];
static void *scheduler_sp;
static fiber *current;
static const std::function<void()> *body;
static std::vector<unsigned char> dyn_shared;
static unsigned long launches;
#ifdef PK_EMU_ASAN
static void *scheduler_stack, *scheduler_fake_stack;
static size_t scheduler_stack_bytes;
#endif

/* The context switch: pushes the callee-saved registers on the current stack, stores the
 * stack pointer in *save and resumes the stack at load. (MXCSR and the x87 control word are
 * callee-saved too, but nothing here changes them.) glibc's swapcontext costs a system call
 * per switch; the emulation switches millions of times. */
extern "C" void pk_emu_switch(void **save, void *load);
asm(".text\n"
    ".globl pk_emu_switch\n"
    ".type pk_emu_switch, @function\n"
    "pk_emu_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size pk_emu_switch, .-pk_emu_switch\n");

/* ---- the block in flight: who is ready, who waits where ---- */

static int n_threads, live, at_block_barrier;
static int warp_live[MAX_WARPS], warp_waiting[MAX_WARPS];
/* The launch's schedule, one of four in turn: threads in ascending or descending order, and a
 * warp whose shuffle completes either queues behind the others (warps move in step) or runs
 * ahead of them until a block barrier (a missing barrier between warps shows). */
static bool descending, warp_ahead;
static int ready[MAX_THREADS], ready_head, ready_count; /* a ring of fiber indices */
static unsigned char exchange[MAX_WARPS][2][WARP][8];   /* [warp][parity][lane] shuffled values */

static void make_ready(fiber *f, bool front) {
    f->state = READY;
    if (front) {
        ready_head = (ready_head + MAX_THREADS - 1) % MAX_THREADS;
        ready[ready_head] = f->index;
        ready_count++;
    } else {
        ready[(ready_head + ready_count++) % MAX_THREADS] = f->index;
    }
}

static fiber *next_ready(void) {
    if (!ready_count) return NULL;
    fiber *f = &fibers[ready[ready_head]];
    ready_head = (ready_head + 1) % MAX_THREADS;
    ready_count--;
    return f;
}

/* Readies the threads in `state` among [first, end) in this launch's sweep order, behind the
 * ready ones or (front) ahead of them. */
static void release(int first, int end, fiber_state state, bool front) {
    for (int i = first; i < end; i++) {
        bool backwards = descending != front; /* pushing to the front reverses the order */
        fiber *f = &fibers[backwards ? end - 1 - (i - first) : i];
        if (f->state == state) make_ready(f, front);
    }
}

/* Called when a thread arrives at a barrier or exits: releases a barrier every live thread of
 * its scope has reached. Returns true when one was released; for an arriving thread that can
 * only be its own (the other kind never counts it). */
static bool complete_barriers(int warp) {
    bool released = false;
    if (warp_waiting[warp] && warp_waiting[warp] == warp_live[warp]) {
        int first = warp * WARP, end = first + WARP < n_threads ? first + WARP : n_threads;
        if (warp_live[warp] != WARP || end - first != WARP)
            fatal("warp shuffle with a full mask in a partial warp or one with exited lanes");
        for (int i = first; i < end; i++)
            if (fibers[i].shuffle_mask != 0xffffffffu) fatal("warp shuffle with a partial mask");
        warp_waiting[warp] = 0;
        release(first, end, AT_WARP_BARRIER, warp_ahead);
        released = true;
    }
    if (at_block_barrier && at_block_barrier == live) {
        at_block_barrier = 0;
        release(0, n_threads, AT_BLOCK_BARRIER, false);
        released = true;
    }
    return released;
}

/* Switches from fiber self (or the scheduler, self NULL) to the next ready fiber, or back to
 * the scheduler when none is. */
static void switch_away(fiber *self) {
    fiber *next = next_ready();
    void **save = self ? &self->sp : &scheduler_sp;
#ifdef PK_EMU_ASAN
    /* NULL tells ASan the stack being left is gone: only a finished fiber's is. */
    void **fake = !self ? &scheduler_fake_stack : self->state != DONE ? &self->fake_stack : NULL;
    if (next)
        __sanitizer_start_switch_fiber(fake, next->stack + guard_bytes, stack_bytes - guard_bytes);
    else
        __sanitizer_start_switch_fiber(fake, scheduler_stack, scheduler_stack_bytes);
#endif
    void *load = next ? next->sp : scheduler_sp;
    if (next) next->state = RUNNING;
    current = next;
    pk_emu_switch(save, load);
#ifdef PK_EMU_ASAN
    __sanitizer_finish_switch_fiber(self ? self->fake_stack : scheduler_fake_stack, NULL, NULL);
#endif
}

/* The running thread waits at a barrier, unless it is the last to arrive. */
static void wait_at(fiber_state where) {
    fiber *self = current;
    if (where == AT_WARP_BARRIER)
        warp_waiting[self->warp]++;
    else
        at_block_barrier++;
    /* Counted but still RUNNING, so a release readies the others and the last to arrive goes on. */
    if (complete_barriers(self->warp)) return;
    self->state = where;
    switch_away(self);
}

const uint3 &thread_idx() { return current->idx; }
int lane_id() { return current->lane; }
void *dynamic_shared() { return dyn_shared.data(); }
/* The __syncthreads the block's waiting threads reached (set by the first to arrive). */
static const char *barrier_file;
static int barrier_line;

void sync_block(const char *file, int line) {
    if (!at_block_barrier) {
        barrier_file = file;
        barrier_line = line;
    } else if (line != barrier_line || (file != barrier_file && strcmp(file, barrier_file))) {
        fprintf(stderr, "cuda_emu: threads of a block wait at %s:%d and at %s:%d: ", barrier_file, barrier_line, file,
                line);
        fatal("__syncthreads in divergent code");
    }
    wait_at(AT_BLOCK_BARRIER);
}

void misuse(const char *what) { fatal(what); }

void shuffle(unsigned mask, const void *value, size_t size, int src_lane, void *out) {
    fiber *f = current;
    unsigned char(*slots)[8] = exchange[f->warp][f->shuffles & 1];
    if (size == 4)
        memcpy(slots[f->lane], value, 4);
    else if (size == 8)
        memcpy(slots[f->lane], value, 8);
    else
        fatal("warp shuffle of a value that is not 4 or 8 bytes");
    f->shuffles++;
    f->shuffle_mask = mask;
    wait_at(AT_WARP_BARRIER);
    if (size == 4)
        memcpy(out, slots[src_lane & (WARP - 1)], 4);
    else
        memcpy(out, slots[src_lane & (WARP - 1)], 8);
}

void gather(const void *value, size_t size, void *all) {
    static unsigned char gathered[MAX_WARPS][2][WARP][32]; /* as exchange, wider */
    fiber *f = current;
    unsigned char(*slots)[32] = gathered[f->warp][f->shuffles & 1];
    if (size > sizeof slots[0]) fatal("warp gather of more than 32 bytes a lane");
    memcpy(slots[f->lane], value, size);
    f->shuffles++;
    f->shuffle_mask = 0xffffffffu;
    wait_at(AT_WARP_BARRIER);
    for (int lane = 0; lane < WARP; lane++) memcpy((unsigned char *)all + (size_t)lane * size, slots[lane], size);
}

/* A fiber's first frame: runs the kernel body, then leaves for good. */
static void fiber_main() {
#ifdef PK_EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
    (*body)();
    fiber *self = current;
    self->state = DONE;
    live--;
    warp_live[self->warp]--;
    complete_barriers(self->warp);
    switch_away(self);
    fatal("a finished fiber was resumed");
}

/* A stack that pk_emu_switch enters at fiber_main with the alignment of a called function.
 * Tops at the same offset of equally spaced stacks would share cache sets (every switch would
 * miss), so each fiber's top is shifted by its own multiple of 1088 bytes, up to 64 KiB. */
static void *fresh_stack(const fiber *f) {
    uint64_t *top = (uint64_t *)(f->stack + stack_bytes - (size_t)f->index * 1088 % (64 << 10));
    top[-1] = 0; /* fiber_main's return address: it never returns */
    top[-2] = (uint64_t)(uintptr_t)fiber_main;
    for (int i = 3; i <= 8; i++) top[-i] = 0; /* rbp, rbx, r12..r15 */
    return &top[-8];
}

static void alloc_stacks(void) {
    static bool done;
    if (done) return;
    for (int i = 0; i < MAX_THREADS; i++) {
        void *p = mmap(NULL, stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) fatal("cannot map fiber stacks");
        mprotect(p, guard_bytes, PROT_NONE); /* an overflow faults instead of corrupting */
        fibers[i].stack = (char *)p;
        fibers[i].index = i;
    }
#ifdef PK_EMU_ASAN
    pthread_attr_t attr;
    pthread_getattr_np(pthread_self(), &attr);
    pthread_attr_getstack(&attr, &scheduler_stack, &scheduler_stack_bytes);
    pthread_attr_destroy(&attr);
#endif
    done = true;
}

/* The linker's bounds of the section holding every kernel's __shared__ variables. */
extern "C" __attribute__((weak)) uint64_t __start_pk_emu_shared[], __stop_pk_emu_shared[];

/* After each block the section is filled with NaN bytes again, and the words the block wrote
 * (8 bytes no longer all ones) are counted: its static shared memory, as far as it can be seen
 * (a variable never written, or written with all-ones bytes, is missed). The section holds every
 * kernel's variables (hundreds of KiB, shared.ld), so a kernel's blocks refill only the words its
 * blocks were seen to write, learned by whole-section passes on the first and last block of its
 * first launches (the last block run is the one that merges, where a kernel writes what the
 * others do not). Volatile accesses: a plain loop would become a memset call, which ASan checks
 * against the redzones it keeps around the template kernels' variables (gathered here by the
 * linker, not by the compiler); no_sanitize_address, as those redzones are filled too. */
struct shared_footprint {
    std::vector<uint32_t> words; /* ascending word indices into the section */
    unsigned launches;
};
enum { LEARNING_LAUNCHES = 4 }; /* the four schedules */

static const uint64_t unwritten_shared = ~(uint64_t)0;

/* Refills the whole section; adds the written words to fp (unless NULL). Returns the bytes written. */
__attribute__((no_sanitize_address)) static size_t refill_all_shared(shared_footprint *fp) {
    volatile uint64_t *base = __start_pk_emu_shared;
    size_t n = (size_t)(__stop_pk_emu_shared - __start_pk_emu_shared), written = 0;
    std::vector<uint32_t> seen;
    for (size_t i = 0; i < n; i++)
        if (base[i] != unwritten_shared) {
            base[i] = unwritten_shared;
            written += sizeof *base;
            if (fp) seen.push_back((uint32_t)i);
        }
    if (fp && !seen.empty()) {
        std::vector<uint32_t> merged;
        std::set_union(fp->words.begin(), fp->words.end(), seen.begin(), seen.end(), std::back_inserter(merged));
        fp->words.swap(merged);
    }
    return written;
}

/* Refills the words fp's kernel was seen to write. Returns the bytes written. */
__attribute__((no_sanitize_address)) static size_t refill_known_shared(const shared_footprint &fp) {
    volatile uint64_t *base = __start_pk_emu_shared;
    size_t written = 0;
    for (uint32_t i : fp.words)
        if (base[i] != unwritten_shared) {
            base[i] = unwritten_shared;
            written += sizeof *base;
        }
    return written;
}

/* Runs one block on a filled section (see shared_footprint) and a fresh dynamic buffer: NaN
 * bytes, not the previous block's values. */
static void run_block(void) {
    memset(dyn_shared.data(), 0xff, dyn_shared.size());
    for (int t = 0; t < n_threads; t++) {
        fiber *f = &fibers[t];
        f->sp = fresh_stack(f);
        f->idx = uint3{t % dims.block_dim.x, t / dims.block_dim.x % dims.block_dim.y,
                       t / (dims.block_dim.x * dims.block_dim.y)};
        f->lane = t % WARP;
        f->warp = t / WARP;
        f->shuffles = 0;
        f->state = AT_BLOCK_BARRIER; /* released below, in sweep order */
    }
    live = n_threads;
    at_block_barrier = 0;
    for (int w = 0; w < MAX_WARPS; w++) {
        warp_live[w] = w * WARP < n_threads ? (n_threads - w * WARP < WARP ? n_threads - w * WARP : WARP) : 0;
        warp_waiting[w] = 0;
    }
    ready_head = ready_count = 0;
    release(0, n_threads, AT_BLOCK_BARRIER, false);
    switch_away(NULL); /* back here when no fiber is ready */
    if (live) fatal("barrier deadlock: threads wait at different barriers");
}

static bool waited; /* the running launch called pk_grid_wait */
void grid_waited() { waited = true; }

void thread_fence() {
    if (holding) publish_held();
}

/* Shared memory (the section's statics or the dynamic buffer) is the block's own: its atomics
 * hand nothing to other blocks. */
void atomic_stored(const void *p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    if ((a >= (uintptr_t)__start_pk_emu_shared && a < (uintptr_t)__stop_pk_emu_shared) ||
        a - (uintptr_t)dyn_shared.data() < dyn_shared.size())
        return;
    if (!holding) return;
    uintptr_t p_page = a & ~(uintptr_t)(page - 1);
    for (size_t i = 0; i < held.size(); i++)
        if (held[i] == p_page) memcpy(pre_images + i * page + (a - p_page), p, bytes);
}

/* What every device grants a block without opting in (cudaFuncSetAttribute, which nothing here
 * uses): static and dynamic shared memory together. */
static const size_t default_shared_limit = 48 * 1024;

static cudaError_t run_launch(dim3 grid, dim3 block, size_t smem, const char *name, uintptr_t kernel,
                              bool programmatic, const std::function<void()> &fn) {
    waited = false;
    static bool filled; /* the section starts as zeros, not NaN */
    if (!filled) refill_all_shared(NULL);
    filled = true;
    static std::map<uintptr_t, shared_footprint> footprints; /* by kernel */
    shared_footprint &fp = footprints[kernel];
    const bool learning = fp.launches++ < LEARNING_LAUNCHES;
    alloc_stacks();
    n_threads = (int)(block.x * block.y * block.z);
    descending = launches & 1;
    warp_ahead = launches & 2;
    launches++;
    unsigned long n_blocks = (unsigned long)grid.x * grid.y * grid.z;
    size_t static_shared = 0; /* the most any block wrote */
    holding = n_blocks > 1 && hold_all(); /* a lone block has no one to hide its stores from */
    if (holding) reserve_holds();
    dyn_shared.resize(smem ? smem : 1); /* filled by each block */
    body = &fn;
    dims.grid_dim = grid;
    dims.block_dim = block;
    /* Every other holding launch takes the blocks in descending order: the last block to arrive
     * must be found by its ticket, not its index. */
    static unsigned long holding_launches;
    bool blocks_descending = holding && holding_launches++ % 2;
    for (unsigned long k = 0; k < n_blocks; k++) {
        unsigned long i = blocks_descending ? n_blocks - 1 - k : k;
        dims.block_idx =
            uint3{(unsigned)(i % grid.x), (unsigned)(i / grid.x % grid.y), (unsigned)(i / grid.x / grid.y)};
        run_block();
        size_t written = learning && (k == 0 || k == n_blocks - 1) ? refill_all_shared(&fp) : refill_known_shared(fp);
        static_shared = written > static_shared ? written : static_shared;
        if (holding) set_aside_held();
    }
    /* A device refuses the launch (too much shared memory) before any block runs; only now are
     * the kernel's static variables known here, so the run stops. */
    if (static_shared + smem > default_shared_limit) {
        fprintf(stderr, "cuda_emu: %s: %zu bytes of static shared memory written and %zu dynamic: ", name,
                static_shared, smem);
        fatal("more shared memory than a device grants a block (48 KiB) without opting in");
    }
    if (holding) {
        unhold(held); /* the last block's stores are in set_aside */
        held.clear();
        land_set_aside();
    }
    holding = false;
    if (programmatic && !waited) {
        fprintf(stderr, "cuda_emu: %s: ", name);
        fatal("a programmatic launch whose kernel never calls pk_grid_wait (use PK_LAUNCH_PLAIN)");
    }
    return cudaSuccess;
}

void launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const char *name, uintptr_t kernel,
            bool programmatic, std::function<void()> fn) {
    size_t threads = (size_t)block.x * block.y * block.z;
    if (!threads || threads > MAX_THREADS || block.z > 64 || !grid.x || !grid.y || !grid.z || grid.y > 65535 ||
        grid.z > 65535 || smem > default_shared_limit) {
        note(cudaErrorInvalidConfiguration);
        return;
    }
    if (injected(PK_EMU_LAUNCH)) {
        note(cudaErrorLaunchFailure);
        return;
    }
    enqueue(stream, step::KERNEL, name, [grid, block, smem, name, kernel, programmatic, fn]() {
        return run_launch(grid, block, smem, name, kernel, programmatic, fn);
    });
}

} // namespace pk_emu

/* ---- cuBLAS ---- */

struct pk_emu_blas {
    cudaStream_t stream;
};

extern "C" cublasStatus_t cublasCreate(cublasHandle_t *handle) {
    *handle = NULL;
    if (injected(PK_EMU_CREATE)) return CUBLAS_STATUS_ALLOC_FAILED;
    *handle = new pk_emu_blas{NULL};
    live_objects++;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasDestroy(cublasHandle_t handle) {
    if (handle) live_objects--;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void *workspace, size_t bytes) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    return bytes && !on_device(workspace, bytes) ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t opa, cublasOperation_t opb, int m,
                                      int n, int k, const float *alpha, const float *a, int lda, const float *b,
                                      int ldb, const float *beta, float *c, int ldc) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    const int a_rows = opa == CUBLAS_OP_N ? m : k, b_rows = opb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || ldc < (m > 1 ? m : 1) || lda < (a_rows > 1 ? a_rows : 1) ||
        ldb < (b_rows > 1 ? b_rows : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    const float al = *alpha, be = *beta;
    /* The operands' extents, checked against their allocations as a device would fault. */
    size_t a_cols = opa == CUBLAS_OP_N ? (size_t)k : (size_t)m, b_cols = opb == CUBLAS_OP_N ? (size_t)n : (size_t)k;
    size_t a_need = a_cols ? (a_cols - 1) * (size_t)lda + (size_t)a_rows : 0;
    size_t b_need = b_cols ? (b_cols - 1) * (size_t)ldb + (size_t)b_rows : 0;
    size_t c_need = n ? ((size_t)(n - 1) * (size_t)ldc + (size_t)m) : 0;
    if ((a_need && !on_device(a, a_need * 4)) || (b_need && !on_device(b, b_need * 4)) ||
        (c_need && !on_device(c, c_need * 4)))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (injected(PK_EMU_GEMM)) return CUBLAS_STATUS_EXECUTION_FAILED;
    cudaError_t e = enqueue(handle->stream, step::GEMM, "cublasSgemm", [=]() {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float s = 0.0f;
                for (int p = 0; p < k; p++) {
                    float av = opa == CUBLAS_OP_N ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                    float bv = opb == CUBLAS_OP_N ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                    s += av * bv;
                }
                float *cij = &c[(size_t)j * ldc + i];
                *cij = be == 0.0f ? al * s : al * s + be * *cij;
            }
        return cudaSuccess;
    });
    return e ? CUBLAS_STATUS_EXECUTION_FAILED : CUBLAS_STATUS_SUCCESS;
}
