// Every collective kind on 2 ranks; written by test/data/runtime/make_modules.py.
builtin.module attributes {lancet.world_size = 2 : i64} {
  func.func @collectives(%x: tensor<4x4xf32>, %y: tensor<3xf32>, %z: tensor<4x3xf32>, %h: tensor<5xf16>, %k: tensor<6xi32> {lancet.max_int = 100 : i64}, %d: tensor<2x3x2xf32>, %n: tensor<2xi64> {lancet.max_int = 4 : i64}) -> (tensor<4x4xf32>, tensor<3xf32>, tensor<4x4xf32>, tensor<3xf32>, tensor<5xf16>, tensor<6xi32>, tensor<3xf32>, tensor<4x8xf32>, tensor<6xf32>, tensor<4x2xf32>, tensor<2x3xf32>, tensor<8x2xf32>, tensor<2x6xf32>, tensor<2x3x2xf32>, tensor<2xi64>) {
    %s1, %s2 = comm.allreduce %x, %y : (tensor<4x4xf32>, tensor<3xf32>) -> (tensor<4x4xf32>, tensor<3xf32>)
    %m1 = comm.allreduce %x reduce max : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %m2 = comm.allreduce %y reduce prod group <[[0, 1]]> : (tensor<3xf32>) -> tensor<3xf32>
    %m3 = comm.allreduce %h reduce avg : (tensor<5xf16>) -> tensor<5xf16>
    %m4 = comm.allreduce %k reduce avg : (tensor<6xi32>) -> tensor<6xi32>
    %m5 = comm.allreduce %y reduce min : (tensor<3xf32>) -> tensor<3xf32>
    %g1 = comm.allgather %x axis 1 : (tensor<4x4xf32>) -> tensor<4x8xf32>
    %g2 = comm.allgather %y group <[[0, 1]]> : (tensor<3xf32>) -> tensor<6xf32>
    %r1 = comm.reduce_scatter %x reduce avg axis 1 : (tensor<4x4xf32>) -> tensor<4x2xf32>
    %r2 = comm.reduce_scatter %z : (tensor<4x3xf32>) -> tensor<2x3xf32>
    %a1 = comm.all_to_all %x split 1 concat 0 : (tensor<4x4xf32>) -> tensor<8x2xf32>
    %a2 = comm.all_to_all %z split 0 concat 1 group <[[0, 1]]> : (tensor<4x3xf32>) -> tensor<2x6xf32>
    %v1, %c1 = comm.all_to_allv %d, %n : (tensor<2x3x2xf32>, tensor<2xi64>) -> (tensor<2x3x2xf32>, tensor<2xi64>)
    func.return %s1, %s2, %m1, %m2, %m3, %m4, %m5, %g1, %g2, %r1, %r2, %a1, %a2, %v1, %c1 : tensor<4x4xf32>, tensor<3xf32>, tensor<4x4xf32>, tensor<3xf32>, tensor<5xf16>, tensor<6xi32>, tensor<3xf32>, tensor<4x8xf32>, tensor<6xf32>, tensor<4x2xf32>, tensor<2x3xf32>, tensor<8x2xf32>, tensor<2x6xf32>, tensor<2x3x2xf32>, tensor<2xi64>
  }
}
