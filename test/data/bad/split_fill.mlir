// two chunks for --split-input-file; the second's bad lancet.fill is on line 9 of the file
func.func @ok(%x: tensor<8xf32>) -> tensor<8xf32> {
  %r = comm.allreduce %x : (tensor<8xf32>) -> tensor<8xf32>
  func.return %r : tensor<8xf32>
}
// -----
func.func @bad(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = comp.add %x, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %1 = comm.allreduce %0 {lancet.fill = 2.0 : f64} : (tensor<8xf32>) -> tensor<8xf32>
  func.return %1 : tensor<8xf32>
}
