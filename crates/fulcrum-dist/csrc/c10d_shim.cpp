// The few c10d calls fulcrum needs, behind a C ABI: a TCPStore rendezvous, a Gloo (CPU) or NCCL
// (CUDA) process group on it, and blocking collectives on tensors handed over as tch's
// `at::Tensor*`. Every C++ exception is caught here and returned as a message (the caller frees
// it with fc_free_error), so nothing unwinds into Rust.
//
// Built against the headers of the PyPI torch wheel (its symbols live in libtorch_cpu.so /
// libtorch_cuda.so); the wheel ships no gloo headers, so Gloo's come from Debian's libgloo-dev
// (ProcessGroupGloo holds gloo objects only through pointers, so its layout does not depend on
// the gloo version; linking proves every symbol used is the wheel's own).

#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#ifdef FULCRUM_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace {

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
  std::chrono::milliseconds timeout;
};

char* copy_message(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) {
    std::memcpy(out, s.c_str(), s.size() + 1);
  }
  return out;
}

// Runs `f`, turning any exception into a message in *err; 0 on success, 1 on failure.
template <typename F>
int guarded(char** err, F&& f) {
  try {
    f();
    return 0;
  } catch (const c10::Error& e) {
    *err = copy_message(e.what_without_backtrace());
  } catch (const std::exception& e) {
    *err = copy_message(e.what());
  } catch (...) {
    *err = copy_message("unknown C++ exception");
  }
  return 1;
}

c10d::ReduceOp reduce_op(int op) {
  switch (op) {
    case 0:
      return c10d::ReduceOp::SUM;
    case 1:
      return c10d::ReduceOp::MAX;
    case 2:
      return c10d::ReduceOp::MIN;
    default:
      throw std::invalid_argument("unknown reduce op " + std::to_string(op));
  }
}

void wait(const c10::intrusive_ptr<c10d::Work>& work, const Group* g) {
  work->wait(g->timeout);
}

}  // namespace

extern "C" {

void fc_free_error(char* err) { std::free(err); }

// A process group of `world` ranks meeting at host:port (rank 0 serves the store). `backend`:
// 0 Gloo, 1 NCCL. `timeout_ms` bounds the rendezvous and every collective.
void* fc_group_new(int backend, const char* host, uint16_t port, int rank, int world,
                   int64_t timeout_ms, char** err) {
  Group* out = nullptr;
  guarded(err, [&] {
    auto timeout = std::chrono::milliseconds(timeout_ms);
    c10d::TCPStoreOptions opts;
    opts.port = port;
    opts.isServer = rank == 0;
    opts.numWorkers = static_cast<std::size_t>(world);
    opts.waitWorkers = true;
    opts.timeout = timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(std::string(host), opts);
    auto store = c10::make_intrusive<c10d::PrefixStore>("fulcrum", tcp);
    c10::intrusive_ptr<c10d::Backend> pg;
    if (backend == 0) {
      auto o = c10d::ProcessGroupGloo::Options::create(timeout);
      // Loopback for a job on one machine; the host's own name otherwise (what
      // torch.distributed does without GLOO_SOCKET_IFNAME).
      const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      if (ifname != nullptr && *ifname != '\0') {
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      } else if (std::string(host) == "127.0.0.1" || std::string(host) == "localhost") {
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      } else {
        o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, o);
    } else {
#ifdef FULCRUM_NCCL
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = timeout;
      pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, o);
#else
      throw std::runtime_error(
          "this build has no NCCL: rebuild with `--features nccl` (fulcrum-dist) on the CUDA "
          "torch wheel");
#endif
    }
    out = new Group{store, pg, timeout};
  });
  return out;
}

void fc_group_free(void* g) { delete static_cast<Group*>(g); }

int fc_all_reduce(void* gp, at::Tensor* t, int op, char** err) {
  auto* g = static_cast<Group*>(gp);
  return guarded(err, [&] {
    std::vector<at::Tensor> ts{*t};
    c10d::AllreduceOptions o;
    o.reduceOp = reduce_op(op);
    o.timeout = g->timeout;
    wait(g->backend->allreduce(ts, o), g);
  });
}

int fc_broadcast(void* gp, at::Tensor* t, int root, char** err) {
  auto* g = static_cast<Group*>(gp);
  return guarded(err, [&] {
    std::vector<at::Tensor> ts{*t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = g->timeout;
    wait(g->backend->broadcast(ts, o), g);
  });
}

// `out` holds world * numel(in) elements: rank r's `in` lands at [r * n, (r + 1) * n).
int fc_all_gather(void* gp, at::Tensor* out, at::Tensor* in, char** err) {
  auto* g = static_cast<Group*>(gp);
  return guarded(err, [&] {
    c10d::AllgatherOptions o;
    o.timeout = g->timeout;
    wait(g->backend->_allgather_base(*out, *in, o), g);
  });
}

// `in` holds world * numel(out) elements: rank r receives the reduction of every rank's
// [r * n, (r + 1) * n).
int fc_reduce_scatter(void* gp, at::Tensor* out, at::Tensor* in, int op, char** err) {
  auto* g = static_cast<Group*>(gp);
  return guarded(err, [&] {
    c10d::ReduceScatterOptions o;
    o.reduceOp = reduce_op(op);
    o.timeout = g->timeout;
    wait(g->backend->_reduce_scatter_base(*out, *in, o), g);
  });
}

int fc_barrier(void* gp, char** err) {
  auto* g = static_cast<Group*>(gp);
  return guarded(err, [&] {
    c10d::BarrierOptions o;
    o.timeout = g->timeout;
    wait(g->backend->barrier(o), g);
  });
}

}  // extern "C"
