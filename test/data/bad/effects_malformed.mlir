// a lancet.effects entry that is neither "read:<name>" nor "write:<name>"
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = comp.add %x, %x {lancet.effects = ["foo:x"]} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %a : tensor<4xf32>
}
