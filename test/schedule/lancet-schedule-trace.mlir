// RUN: lancet-opt %s -p 'lancet-schedule{partition=none}' | filecheck %s
// RUN: lancet-opt %s -p 'lancet-schedule{partition=none},simulate' | filecheck %s --check-prefix=SIM
// RUN: lancet-opt %s -p 'lancet-schedule{partition=none}' --verbose -o /dev/null 2>&1 | filecheck %s --check-prefix=LOG

// An imported step's three kinds of special node (review of #19, finding 1): a memcpy runs on
// its copy engine, a trace.payload on no stream; the schedulers see them so.
// m: memcpy HtoD (20) -> km (10) -> payload -> cm: all-reduce (100); ka (15) -> payload ->
// ca: all-reduce (10); kb (50). Input order: m 0-20 (copy engine), km 20-30, cm 30-130,
// ka 30-45, ca 130-140, kb 45-95: 140 us. ka and ca first: ka 0-15, ca 15-25, m 0-20,
// km 20-30, cm 30-130, kb 30-80: 130 us, the optimum (cm cannot end before 20 + 10 + 100).
// A search that charged the copy to the compute stream rated that order 145 (ka 0-15,
// m 15-35, km 35-45, cm 45-145) and kept the input's 140.
func.func @step() {
  %m = trace.kernel {name = "Memcpy HtoD (Pinned -> Device)", lancet.time_us = 20.0 : f64, lancet.trace_kind = "memcpy"} : () -> !trace.token
  %km = trace.kernel %m {name = "km", lancet.time_us = 10.0 : f64, lancet.trace_kind = "kernel"} : (!trace.token) -> !trace.token
  %pm = trace.payload %km {lancet.time_us = 0.0 : f64} : (!trace.token) -> tensor<4096xi8>
  %cm = comm.allreduce %pm {lancet.time_us = 100.0 : f64} : (tensor<4096xi8>) -> tensor<4096xi8>
  %ka = trace.kernel {name = "ka", lancet.time_us = 15.0 : f64, lancet.trace_kind = "kernel"} : () -> !trace.token
  %pa = trace.payload %ka {lancet.time_us = 0.0 : f64} : (!trace.token) -> tensor<4096xi8>
  %ca = comm.allreduce %pa {lancet.time_us = 10.0 : f64} : (tensor<4096xi8>) -> tensor<4096xi8>
  %kb = trace.kernel {name = "kb", lancet.time_us = 50.0 : f64, lancet.trace_kind = "kernel"} : () -> !trace.token
  func.return
}
// Launch order by simulated start (a stream-less node after the ops starting with it)
// CHECK-LABEL: func.func @step
// CHECK-NEXT:    %ka = trace.kernel
// CHECK-NEXT:    %m = trace.kernel
// CHECK-NEXT:    %pa = trace.payload %ka
// CHECK-NEXT:    %ca = comm.allreduce %pa
// CHECK-NEXT:    %km = trace.kernel %m
// CHECK-NEXT:    %kb = trace.kernel
// CHECK-NEXT:    %pm = trace.payload %km
// CHECK-NEXT:    %cm = comm.allreduce %pm
// SIM-LABEL: func.func @step
// SIM-SAME:    lancet.makespan_us = 1.300000e+02 : f64
// LOG: lancet-schedule @step: input: makespan 140.0 us
// LOG: lancet-schedule @step: local search: makespan 130.0 us
