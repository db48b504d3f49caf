func.func @step(%x: tensor<1024xf32>) -> (tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>) {
  %g1 = "test.op"(%x) {lancet.time_us = 3.0 : f64} : (tensor<1024xf32>) -> tensor<1024xf32>
  %r1 = comm.allreduce %g1 {lancet.time_us = 5.0 : f64} : (tensor<1024xf32>) -> tensor<1024xf32>
  %u1 = "test.op"(%r1) {lancet.time_us = 2.0 : f64} : (tensor<1024xf32>) -> tensor<1024xf32>
  %g2 = "test.op"(%x) {lancet.time_us = 4.0 : f64} : (tensor<1024xf32>) -> tensor<1024xf32>
  %r2 = comm.allreduce %g2 {lancet.time_us = 5.0 : f64} : (tensor<1024xf32>) -> tensor<1024xf32>
  %u2 = "test.op"(%r2) {lancet.time_us = 2.0 : f64} : (tensor<1024xf32>) -> tensor<1024xf32>
  %y = "test.op"(%x) {lancet.time_us = 6.0 : f64} : (tensor<1024xf32>) -> tensor<1024xf32>
  func.return %u1, %u2, %y : tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>
}
