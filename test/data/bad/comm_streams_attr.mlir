builtin.module attributes {lancet.comm_streams = 0 : i64} {
  func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
    %r = comm.allreduce %x : (tensor<8xf32>) -> tensor<8xf32>
    func.return %r : tensor<8xf32>
  }
}
