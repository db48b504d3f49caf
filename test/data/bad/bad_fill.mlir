// a hand-edited lancet.fill (a fraction of the collective's bytes) out of (0, 1]
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = comp.add %x, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %1 = comm.allreduce %0 {lancet.fill = 2.0 : f64} : (tensor<8xf32>) -> tensor<8xf32>
  func.return %1 : tensor<8xf32>
}
